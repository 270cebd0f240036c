package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// idleRelay starts a relay in mode that never polls on its own during a test (the
// first claims find nothing: the table is empty), and in ordered mode waits until it
// leases every partition, so that only PublishSeqs publishes what the test writes next.
func idleRelay(t *testing.T, pool *pgxpool.Pool, mode relay.Mode, retention relay.RetentionMode) (*relay.Relay, *memsink.Sink) {
	t.Helper()
	cfg := fastConfig()
	cfg.Mode, cfg.Retention.Mode = mode, retention
	cfg.Wakeup, cfg.PollInterval = relay.WakeupPoll, time.Hour
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	if mode == relay.Ordered {
		waitSQL(t, pool, 10*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
	}
	time.Sleep(100 * time.Millisecond) // the wake-ups of the leases taken have been claimed
	return r, sink
}

// seqsOf returns the seqs of the events of the aggregates ids, in seq order.
func seqsOf(t *testing.T, pool *pgxpool.Pool, ids ...string) []int64 {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT seq FROM outbox.events WHERE aggregate_id = ANY($1) ORDER BY seq`, ids)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// PublishSeqs (the by-seq claim a change-data-capture source feeds) publishes the named
// events through the relay's batches, in each mode and retention: all of them, each
// aggregate in order, an aggregate with more events than MaxPerAggregate in several
// batches; the pending rows it leaves are the polling claims'.
func TestPublishSeqsPublishesTheNamedEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		for _, retention := range []relay.RetentionMode{relay.KeepThenDelete, relay.DeleteOnPublish} {
			t.Run(string(mode)+"/"+string(retention), func(t *testing.T) {
				t.Parallel()
				pool := pgtest.Pool(t)
				r, sink := idleRelay(t, pool, mode, retention)
				enqueue(t, pool, []string{"a", "b"}, 5)
				enqueue(t, pool, []string{"hot"}, 25) // more than MaxPerAggregate: several batches
				seqs := seqsOf(t, pool, "a", "b", "hot")
				res, err := r.PublishSeqs(t.Context(), seqs)
				if err != nil {
					t.Fatal(err)
				}
				if res.Published != len(seqs) || res.Left != 0 {
					t.Fatalf("PublishSeqs = %+v, want %d published, none left", res, len(seqs))
				}
				msgs := sink.Messages()
				if len(msgs) != len(seqs) {
					t.Fatalf("%d delivered, want %d", len(msgs), len(seqs))
				}
				if mode == relay.Ordered {
					checkSeqOrder(t, msgs)
				}
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`); n != 0 {
					t.Fatalf("%d rows still pending", n)
				}
			})
		}
	}
}

// checkSeqOrder fails t unless each aggregate's first deliveries are in seq order.
func checkSeqOrder(t *testing.T, msgs []outbox.Message) {
	t.Helper()
	last := map[aggregateKey]int64{}
	for _, m := range msgs {
		if k := keyOf(m); m.Seq <= last[k] {
			t.Fatalf("aggregate %s: seq %d delivered after seq %d", k, m.Seq, last[k])
		}
		last[keyOf(m)] = m.Seq
	}
}

// In ordered mode PublishSeqs claims an aggregate's events only from its head and without
// a gap: a named event behind an earlier pending row it was not given, behind a dead
// row that holds its aggregate, or behind a head scheduled later, is left pending, so
// nothing goes out of order. Each of these fails when the by-seq claim leaves out its
// check.
func TestPublishSeqsKeepsAggregateOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	r, sink := idleRelay(t, pool, relay.Ordered, relay.KeepThenDelete)
	enqueue(t, pool, []string{"behind", "gap", "held", "later"}, 3)
	if _, err := pool.Exec(ctx, `UPDATE outbox.events SET dead_at = now(), last_error = 'test' WHERE aggregate_id = 'held' AND aggregate_version = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox.events SET available_at = now() + interval '1 hour' WHERE aggregate_id = 'later' AND aggregate_version = 1`); err != nil {
		t.Fatal(err)
	}
	behind, gap, held, later := seqsOf(t, pool, "behind"), seqsOf(t, pool, "gap"), seqsOf(t, pool, "held"), seqsOf(t, pool, "later")
	publish := func(seqs ...int64) relay.SeqsResult {
		t.Helper()
		res, err := r.PublishSeqs(ctx, seqs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for name, seqs := range map[string][]int64{
		"behind an earlier pending row": behind[1:],
		"behind a dead row":             held[1:],
		"behind a head scheduled later": later,
	} {
		if res := publish(seqs...); res.Published != 0 || res.Left != len(seqs) {
			t.Errorf("%s: PublishSeqs = %+v, want all %d left", name, res, len(seqs))
		}
	}
	// the first and the third of gap: the first goes, the third waits for the second
	if res := publish(gap[0], gap[2]); res.Published != 1 || res.Left != 1 {
		t.Errorf("a gap: PublishSeqs = %+v, want 1 published, 1 left", res)
	}
	if res := publish(behind...); res.Published != 3 {
		t.Errorf("behind, all named: PublishSeqs = %+v, want 3 published", res)
	}
	if res := publish(gap[1], gap[2]); res.Published != 2 {
		t.Errorf("gap, the rest named: PublishSeqs = %+v, want 2 published", res)
	}
	msgs := sink.Messages()
	checkOrder(t, msgs)
	if len(msgs) != 6 {
		t.Fatalf("%d delivered, want 6 (behind and gap)", len(msgs))
	}
}

// A by-seq batch (PublishSeqs) leaves out the partitions a worker's batch holds in its
// transaction (ADR 0032), and their named events stay pending for the polling claims.
// The end of that transaction wakes the workers, so they go out then, not at a poll an
// hour away: the worker's own claim was not full, so it waits for a wake-up, and a
// by-seq batch sends none.
func TestPublishSeqsLeftBehindABatchInFlightGoOutWhenItEnds(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	release := make(chan struct{})
	var calls atomic.Int32
	sink := &memsink.Sink{FailFunc: func(outbox.Message) error {
		if calls.Add(1) == 1 {
			<-release // the worker's first batch stays in its transaction until released
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.Mode, cfg.Concurrency, cfg.SlowPublish = relay.Ordered, 1, time.Minute
	cfg.Wakeup, cfg.PollInterval, cfg.FallbackPollInterval = relay.WakeupPoll, time.Hour, time.Hour
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	waitSQL(t, pool, 10*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
	time.Sleep(100 * time.Millisecond) //nolint:forbidigo // the wake-ups of the leases taken have been claimed

	enqueue(t, pool, []string{"first"}, 1)
	r.Wake()
	waitUntil(t, 10*time.Second, "the worker's batch publishing", func() bool { return calls.Load() >= 1 })
	enqueue(t, pool, []string{"a", "b", "c"}, 2)
	seqs := seqsOf(t, pool, "a", "b", "c")
	res, err := r.PublishSeqs(t.Context(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Left != len(seqs) {
		t.Fatalf("PublishSeqs beside a batch holding every partition = %+v, want all %d left", res, len(seqs))
	}
	close(release)
	waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	checkSeqOrder(t, sink.Messages())
}
