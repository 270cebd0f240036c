package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/sink/natssink"
)

// RunConfig is what [Run] runs on. Pool and JetStream are required.
type RunConfig struct {
	// Pool is the inventory's database, migrated ([Migrate]).
	Pool *pgxpool.Pool
	// JetStream is where the events come from.
	JetStream jetstream.JetStream
	// Listener, when set, serves [NewHandler] (GET /stock/{sku}).
	Listener net.Listener
	// Runner configures the natssink Runner. Default: natssink's defaults.
	Runner *natssink.RunnerConfig
	// Logger: default slog.Default().
	Logger *slog.Logger
}

// Run ensures the stream and the consumer, then applies the events until ctx ends
// (serving the stock API on cfg.Listener meanwhile, when set), and returns nil; or an
// error when pulling fails for good.
func Run(ctx context.Context, cfg RunConfig) error {
	if cfg.Pool == nil || cfg.JetStream == nil {
		return errors.New("inventory: Run: Pool and JetStream are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cons, err := EnsureConsumer(ctx, cfg.JetStream)
	if err != nil {
		return err
	}
	c, err := New(&Config{Logger: log})
	if err != nil {
		return err
	}
	rc := natssink.RunnerConfig{Logger: log}
	if cfg.Runner != nil {
		rc = *cfg.Runner
	}
	r, err := c.NewRunner(cons, cfg.Pool, &rc)
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	if cfg.Listener != nil {
		srv := &http.Server{Handler: NewHandler(cfg.Pool, log), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(cfg.Listener) }()
		defer func() {
			shutdown, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer done()
			_ = srv.Shutdown(shutdown)
		}()
		log.InfoContext(ctx, "inventory: serving", slog.String("addr", cfg.Listener.Addr().String()))
	}
	return r.Run(ctx)
}

// NewHandler returns the stock API: GET /stock/{sku} answers {"sku": …, "on_hand": …},
// or 404 for an unknown SKU.
func NewHandler(db Execer, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stock/{sku}", func(w http.ResponseWriter, r *http.Request) {
		sku := r.PathValue("sku")
		n, err := Stock(r.Context(), db, sku)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case errors.Is(err, ErrUnknownSKU):
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		case err != nil:
			logger.ErrorContext(r.Context(), "read stock", slog.Any("error", err))
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "internal error"})
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"sku": sku, "on_hand": n})
		}
	})
	return mux
}
