package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/inbox"
)

// Purge deletes old dedup rows of applied and stale events in batches, and keeps the
// recent ones and those of parked and quarantined events.
func TestPurgeInBatches(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, &inbox.Config{Accept: []inbox.Schema{{EventType: "order.changed", SchemaVersion: 1}}})
	for i := range 25 {
		process(t, c, pool, msg("old-"+string(rune('a'+i)), 0))
	}
	process(t, c, pool, msg("p", 1))
	process(t, c, pool, msg("p", 1)) // stale
	parked := process(t, c, pool, msg("p", 3))
	q := msg("q", 0)
	q.SchemaVersion = 9
	quarantined := process(t, c, pool, q)
	if parked.Outcome != inbox.Parked || quarantined.Outcome != inbox.Quarantined {
		t.Fatal("setup")
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox.inbox SET processed_at = now() - interval '8 days'`); err != nil {
		t.Fatal(err)
	}
	recent := msg("new", 0)
	process(t, c, pool, recent)
	other := newConsumer(t, &inbox.Config{Name: "other"})
	process(t, other, pool, msg("x", 0))
	if _, err := pool.Exec(ctx, `UPDATE outbox.inbox SET processed_at = now() - interval '8 days' WHERE consumer = 'other'`); err != nil {
		t.Fatal(err)
	}

	n, err := c.Purge(ctx, pool, inbox.PurgeOptions{OlderThan: 7 * 24 * time.Hour, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if n != 27 { // 25 applied, p v1 applied, p v1 again stale
		t.Fatalf("purged %d, want 27", n)
	}
	left := count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE consumer = 'billing'`)
	if left != 3 { // parked, quarantined, recent
		t.Fatalf("%d rows left, want 3", left)
	}
	if count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE consumer = 'other'`) != 1 {
		t.Fatal("Purge deleted another consumer's rows")
	}
	// The dedup row of the recent event still collapses its redelivery.
	wantOutcome(t, process(t, c, pool, recent), inbox.Duplicate)
}
