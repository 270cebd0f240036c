package outboxotel_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/relay"
)

// recorder returns a real SDK TracerProvider that records every span in memory, shut
// down when t ends.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func fastConfig() *relay.Config {
	return &relay.Config{
		PollInterval:         20 * time.Millisecond,
		FallbackPollInterval: 20 * time.Millisecond,
		RetryBaseDelay:       20 * time.Millisecond,
		RetryMaxDelay:        200 * time.Millisecond,
		ShutdownTimeout:      5 * time.Second,
		LeaseTTL:             time.Second,
		Logger:               slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// runRelay runs a relay over pool and sink until the returned stop is called (or the
// test ends).
func runRelay(t testing.TB, pool *pgxpool.Pool, sink outbox.Sink, cfg *relay.Config) (r *relay.Relay, stop func()) {
	t.Helper()
	r, err := relay.New(pool, sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("relay: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("relay did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

func enqueue(t testing.TB, pool *pgxpool.Pool, events ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...)
	}); err != nil {
		t.Fatal(err)
	}
}

// attr returns the value of key on s, and whether s has it.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// spansOf returns the ended spans named with prefix whose messaging.message.id is id,
// in the order they ended.
func spansOf(spans []sdktrace.ReadOnlySpan, prefix string, id string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		v, ok := attr(s, "messaging.message.id")
		if ok && v.AsString() == id && len(s.Name()) >= len(prefix) && s.Name()[:len(prefix)] == prefix {
			out = append(out, s)
		}
	}
	return out
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attributeKey(s string) attribute.Key { return attribute.Key(s) }
