package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// The same handler (one insert) with and without the inbox, one event per transaction,
// on one connection at a time: the ratio is the inbox's cost per event.
func BenchmarkConsumer(b *testing.B) {
	pool := pgtest.Pool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (n bigserial, consumer text, event_id uuid, aggregate_id text, version bigint)`); err != nil {
		b.Fatal(err)
	}
	c, err := inbox.New(&inbox.Config{Name: "billing"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("without-inbox", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			m := msg(fmt.Sprint("w-", i%100), 0)
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return effect(ctx, tx, m) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inbox-unversioned", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := c.Process(ctx, pool, msg(fmt.Sprint("u-", i%100), 0), effect); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inbox-versioned", func(b *testing.B) {
		next := map[string]int64{}
		for i := 0; b.Loop(); i++ {
			agg := fmt.Sprint("v-", i%100)
			next[agg]++
			if _, err := c.Process(ctx, pool, msg(agg, next[agg]), effect); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inbox-duplicate", func(b *testing.B) {
		m := msg("d", 0)
		if _, err := c.Process(ctx, pool, m, effect); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if res, err := c.Process(ctx, pool, m, func(context.Context, pgx.Tx, outbox.Message) error { return nil }); err != nil || res.Outcome != inbox.Duplicate {
				b.Fatal(res, err)
			}
		}
	})
}
