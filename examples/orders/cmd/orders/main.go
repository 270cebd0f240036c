// Command orders runs the example's order service: the HTTP API (POST /orders,
// GET /orders/{id}) and, in the same process, the relay publishing the outbox to NATS
// JetStream. It migrates its database at start.
//
// Configuration, from the environment:
//
//	DATABASE_URL  PostgreSQL connection string (required)
//	NATS_URL      NATS server with JetStream (default nats://127.0.0.1:4222)
//	ADDR          HTTP listen address (default 127.0.0.1:8080)
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
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/examples/orders/orders"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		slog.Error("orders", slog.Any("error", err))
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return errors.New("DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	if err := orders.Migrate(ctx, pool); err != nil {
		return err
	}
	natsURL := cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL)
	// No reconnect buffer: while NATS is away a publish fails at once and the relay
	// retries it, instead of flushing it later behind the relay's back.
	nc, err := nats.Connect(natsURL, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("NATS_URL: connect to %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	addr := cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080")
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("ADDR: %w", err)
	}
	return orders.Run(ctx, orders.RunConfig{Pool: pool, JetStream: js, Listener: ln})
}
