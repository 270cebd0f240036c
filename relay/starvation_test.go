package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// However many aggregates cannot be claimed now — held by a dead event, backing off
// after a failure, or scheduled for later — and however they sort before it, an
// aggregate that can be claimed is published promptly. 10,000 of each kind, written by
// SQL, sort before the claimable aggregates ("a…" < "z…"), which are also older or
// newer than them in write order.
func TestUnclaimableAggregatesNeverStarveAClaimableOne(t *testing.T) {
	t.Parallel()
	const n = 10000
	for _, tc := range []struct {
		name  string
		setup string // $1: how many aggregates
	}{
		{"held", `
			INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, dead_at, attempts, last_error)
			SELECT gen_random_uuid(), 'order', 'a' || g, 'order.changed', now(), 3, 'broker: 503' FROM generate_series(1, $1) g;
			INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type)
			SELECT gen_random_uuid(), 'order', 'a' || g, 'order.changed' FROM generate_series(1, $1) g`},
		{"backing-off", `
			INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, attempts, last_error, available_at)
			SELECT gen_random_uuid(), 'order', 'a' || g, 'order.changed', 2, 'broker: 503', now() + interval '1 hour' FROM generate_series(1, $1) g`},
		{"scheduled", `
			INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, available_at)
			SELECT gen_random_uuid(), 'order', 'a' || g, 'order.reminder_due', now() + interval '1 hour' FROM generate_series(1, $1) g`},
	} {
		for _, when := range []string{"claimable-first", "claimable-last"} {
			t.Run(tc.name+"/"+when, func(t *testing.T) {
				t.Parallel()
				pool := pgtest.Pool(t)
				if when == "claimable-first" {
					enqueue(t, pool, aggregates("z", 3), 2)
				}
				for _, stmt := range splitStatements(tc.setup) {
					if _, err := pool.Exec(context.Background(), stmt, n); err != nil {
						t.Fatal(err)
					}
				}
				if when == "claimable-last" {
					enqueue(t, pool, aggregates("z", 3), 2)
				}
				if _, err := pool.Exec(context.Background(), `ANALYZE outbox.events`); err != nil {
					t.Fatal(err)
				}
				sink := &memsink.Sink{}
				cfg := fastConfig()
				cfg.Mode = relay.Ordered
				start(t, newRelay(t, pool, sink, cfg))
				waitSQL(t, pool, 5*time.Second, 6, `SELECT count(*) FROM outbox.events WHERE aggregate_id LIKE 'z%' AND published_at IS NOT NULL`)
				checkOrder(t, sink.Messages())
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id LIKE 'a%' AND published_at IS NOT NULL`); n != 0 {
					t.Fatalf("%d unclaimable events were published", n)
				}
			})
		}
	}
}

// splitStatements splits a test's SQL on semicolons (none of its statements holds one).
func splitStatements(sql string) []string {
	var out []string
	for _, s := range strings.Split(sql, ";") {
		if trimmed := strings.TrimSpace(s); trimmed != "" {
			out = append(out, trimmed)
		}
	}
	return out
}
