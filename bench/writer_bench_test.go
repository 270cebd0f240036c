// Package bench holds the Go benchmarks of the outbox writer; the benchmark programs
// are under cmd/. They need the PostgreSQL server at $BENCH_DSN (default
// postgres://postgres@127.0.0.1:5432/postgres) and skip only with -short.
package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
)

// BenchmarkEnqueue compares, per transaction of 100 events for distinct accounts, one
// Enqueue call with all of them (batch100) against 100 calls of one event (single100).
// ns/op is the whole transaction; ns/event divides it by 100 and enqueue-ns/event
// counts only the time spent in Enqueue.
//
//	go test -run '^$' -bench Enqueue .
func BenchmarkEnqueue(b *testing.B) {
	if testing.Short() {
		b.Skip("BenchmarkEnqueue needs a PostgreSQL server ($BENCH_DSN or " + benchdb.DefaultDSN + "); skipped with -short")
	}
	dsn := os.Getenv("BENCH_DSN")
	if dsn == "" {
		dsn = benchdb.DefaultDSN
	}
	ctx := context.Background()
	pool, err := benchdb.Setup(ctx, dsn, "outbox_writerbench_gotest", 1)
	if err != nil {
		b.Fatalf("set up the benchmark database (is PostgreSQL running? set BENCH_DSN): %v", err)
	}
	b.Cleanup(pool.Close)

	const n = 100
	for _, bc := range []struct {
		name    string
		enqueue func(tx outbox.Tx, events []outbox.Event) error
	}{
		{"batch100", func(tx outbox.Tx, events []outbox.Event) error {
			return outbox.Enqueue(ctx, tx, events...)
		}},
		{"single100", func(tx outbox.Tx, events []outbox.Event) error {
			for _, e := range events {
				if err := outbox.Enqueue(ctx, tx, e); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if err := benchdb.Reset(ctx, pool); err != nil {
				b.Fatal(err)
			}
			var inEnqueue time.Duration
			first := 1
			for b.Loop() {
				events := benchdb.Batch(first, n)
				first = (first+n-1)%benchdb.Accounts + 1
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatalf("begin: %v", err)
				}
				t0 := time.Now()
				err = bc.enqueue(outbox.PgxTx(tx), events)
				inEnqueue += time.Since(t0)
				if err != nil {
					_ = tx.Rollback(ctx)
					b.Fatalf("enqueue: %v", err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatalf("commit: %v", err)
				}
			}
			events := float64(b.N * n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
			b.ReportMetric(float64(inEnqueue.Nanoseconds())/events, "enqueue-ns/event")
		})
	}
}
