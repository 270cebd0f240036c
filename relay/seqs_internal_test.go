package relay

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A by-seq publish that finds the breaker half-open (its wait over, no probe running)
// takes the probe and runs it — in unordered mode too, where its batches run at once: a
// probe taken and not run would leave every worker waiting for its result for ever.
func TestPublishSeqsRunsTheProbeItTakes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	r, err := New(pool, &memsink.Sink{}, &Config{Mode: Unordered, Wakeup: WakeupPoll, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var events []outbox.Event
	for i := range 10 {
		events = append(events, outbox.Event{AggregateType: "order", AggregateID: string(rune('a' + i)), EventType: "e"})
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT seq FROM outbox.events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	r.batches.breaker.down(time.Now().Add(-time.Hour)) // open, and its wait long over
	res, err := r.PublishSeqs(ctx, seqs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != 10 || r.batches.breaker.open() {
		t.Fatalf("PublishSeqs = %+v, breaker open %v: want the probe run, all 10 published, the breaker closed", res, r.batches.breaker.open())
	}
}
