package orders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/relay"
)

// RunConfig is what [Run] runs on. Pool, JetStream and Listener are required.
type RunConfig struct {
	// Pool is the service's database, migrated ([Migrate]).
	Pool *pgxpool.Pool
	// JetStream publishes the events (its connection made with
	// nats.ReconnectBufSize(-1)).
	JetStream jetstream.JetStream
	// Listener is where the HTTP API is served.
	Listener net.Listener
	// Relay configures the in-process relay. Default: relay's defaults.
	Relay *relay.Config
	// Logger: default slog.Default().
	Logger *slog.Logger
}

// shutdownTimeout bounds the wait for HTTP requests in flight at shutdown.
const shutdownTimeout = 10 * time.Second

// Run ensures the stream, then serves the HTTP API on cfg.Listener and runs a relay to
// JetStream until ctx ends; then it stops taking requests, lets those in flight finish
// (up to 10 s), stops the relay and returns nil. It returns an error when either part
// fails for good, after stopping the other.
func Run(ctx context.Context, cfg RunConfig) error {
	if cfg.Pool == nil || cfg.JetStream == nil || cfg.Listener == nil {
		return errors.New("orders: Run: Pool, JetStream and Listener are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if _, err := EnsureStream(ctx, cfg.JetStream); err != nil {
		return err
	}
	r, err := NewRelay(ctx, cfg.Pool, cfg.JetStream, cfg.Relay)
	if err != nil {
		return err
	}
	svc, err := NewService(cfg.Pool, nil)
	if err != nil {
		return err
	}
	defer svc.Close()

	srv := &http.Server{Handler: NewHandler(svc, log), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(cfg.Listener) }()
	// The relay outlives ctx until the HTTP requests in flight have committed, so it
	// stops after publishing what it can of them (the rest waits in the outbox).
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRelay()
	relayed := make(chan error, 1)
	go func() { relayed <- r.Run(relayCtx) }()
	log.InfoContext(ctx, "orders: serving", slog.String("addr", cfg.Listener.Addr().String()))

	var serveErr, relayErr error
	serving, relaying := true, true
	select {
	case <-ctx.Done():
	case serveErr = <-served:
		serving = false
	case relayErr = <-relayed:
		relaying = false
	}
	shutdown, done := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer done()
	shutdownErr := srv.Shutdown(shutdown)
	if serving {
		serveErr = <-served
	}
	stopRelay()
	if relaying {
		relayErr = <-relayed
	}
	var errs []error
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("orders: serve HTTP: %w", serveErr))
	}
	if shutdownErr != nil {
		errs = append(errs, fmt.Errorf("orders: shut down HTTP: %w", shutdownErr))
	}
	if relayErr != nil {
		errs = append(errs, fmt.Errorf("orders: relay: %w", relayErr))
	}
	return errors.Join(errs...)
}
