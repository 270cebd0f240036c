// Command inventory runs the example's inventory consumer: it applies each
// order.placed event from NATS JetStream to its stock table, once per event (the
// inbox), and serves GET /stock/{sku}. It migrates its database at start.
//
// Configuration, from the environment:
//
//	DATABASE_URL  PostgreSQL connection string (required; may be the order service's)
//	NATS_URL      NATS server with JetStream (default nats://127.0.0.1:4222)
//	ADDR          HTTP listen address (default 127.0.0.1:8081)
//	SEED_STOCK    units on hand of SKUs not stocked yet, e.g. "widget=100,gadget=5"
//
// It stops gracefully on SIGINT or SIGTERM.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/examples/orders/inventory"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		slog.Error("inventory", slog.Any("error", err))
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return errors.New("DATABASE_URL is not set")
	}
	seeds, err := parseSeeds(os.Getenv("SEED_STOCK"))
	if err != nil {
		return fmt.Errorf("SEED_STOCK: %w", err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if err := inventory.Migrate(ctx, pool); err != nil {
		return err
	}
	for _, s := range seeds {
		if err := inventory.Seed(ctx, pool, s.sku, s.onHand); err != nil {
			return err
		}
	}
	natsURL := cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL)
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("NATS_URL: connect to %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	addr := cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8081")
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("ADDR: %w", err)
	}
	return inventory.Run(ctx, inventory.RunConfig{Pool: pool, JetStream: js, Listener: ln})
}

type seed struct {
	sku    string
	onHand int
}

// parseSeeds reads "sku=n,sku=n".
func parseSeeds(s string) ([]seed, error) {
	var out []seed
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		sku, n, ok := strings.Cut(item, "=")
		if !ok || sku == "" {
			return nil, fmt.Errorf("%q: want sku=units", item)
		}
		units, err := strconv.Atoi(n)
		if err != nil {
			return nil, fmt.Errorf("%q: units: %w", item, err)
		}
		out = append(out, seed{sku, units})
	}
	return out, nil
}
