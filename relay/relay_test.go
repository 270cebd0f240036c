package relay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

func TestPublishesEverythingInOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("a", 20), 15)
			sink := &memsink.Sink{}
			cfg := fastConfig()
			cfg.Mode = mode
			cfg.BatchSize = 17
			start(t, newRelay(t, pool, sink, cfg))
			msgs := waitFor(t, sink, 30*time.Second, "300 events", distinct(300))
			if mode == relay.Ordered {
				checkOrder(t, msgs)
			}
			waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
			if len(msgs) != 300 {
				t.Fatalf("%d deliveries for 300 events without faults", len(msgs))
			}
		})
	}
}

// Four relays in unordered mode share the backlog through SKIP LOCKED;
// no event is claimed twice at once: without faults, each is delivered exactly once.
func TestUnorderedNoDoubleClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("u", 100), 50)
	sink := &memsink.Sink{}
	cfg := fastConfig()
	cfg.Mode = relay.Unordered
	cfg.BatchSize = 25
	relays := make([]*relay.Relay, 4)
	for i := range relays {
		relays[i] = newRelay(t, pool, sink, cfg)
		start(t, relays[i])
	}
	waitSQL(t, pool, 60*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	msgs := sink.Messages()
	if len(msgs) != 5000 || distinctIDs(msgs) != 5000 {
		t.Fatalf("%d deliveries of %d distinct events, want 5000 of 5000", len(msgs), distinctIDs(msgs))
	}
	busy := 0
	for _, r := range relays {
		if r.Stats().Published > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Fatalf("only %d of 4 relays published: the test did not exercise concurrent claims", busy)
	}
}

// MaxBatchEvents cuts an ordered batch fairly: each of n heads brings at most
// MaxBatchEvents / n events of its aggregate; the relay's memory stays bounded whatever
// BatchSize × MaxPerAggregate.
func TestOrderedBatchCutByMaxBatchEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                   string
		maxBatchEvents, perAgg int // per aggregate, in the first batch
		aggregatesInFirstBatch int
	}{
		{"12 over 5 heads", 12, 2, 5},
		{"fewer than the heads", 3, 1, 3}, // the 3 oldest heads, alone
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("m", 5), 10)
			sink := &memsink.Sink{}
			var (
				mu    sync.Mutex
				sizes []map[aggregateKey]int // events per aggregate, per sink call
			)
			sink.OnPublish = func(msgs []outbox.Message, _ []error) {
				per := map[aggregateKey]int{}
				for _, m := range msgs {
					per[keyOf(m)]++
				}
				mu.Lock()
				sizes = append(sizes, per)
				mu.Unlock()
			}
			cfg := fastConfig()
			cfg.BatchSize, cfg.MaxPerAggregate, cfg.MaxBatchEvents = 5, 10, c.maxBatchEvents
			cfg.PublishCalls = 1 // a sink call is a batch
			cfg.Concurrency = 1  // one batch reads every partition (two deal them out)
			start(t, newRelay(t, pool, sink, cfg))
			checkOrder(t, waitFor(t, sink, 20*time.Second, "all 50 events", distinct(50)))
			mu.Lock()
			defer mu.Unlock()
			first := sizes[0]
			for agg, n := range first {
				if n != c.perAgg {
					t.Errorf("first batch held %d events of %s, want %d", n, agg, c.perAgg)
				}
			}
			if len(first) != c.aggregatesInFirstBatch {
				t.Fatalf("first batch: %v, want %d aggregates", first, c.aggregatesInFirstBatch)
			}
			for i := range c.aggregatesInFirstBatch { // the oldest heads: m0, m1, … were written first
				if first[aggregateKey{"order", fmt.Sprintf("m%d", i)}] == 0 {
					t.Fatalf("first batch %v lacks m%d, one of the oldest heads", first, i)
				}
			}
		})
	}
}

// An aggregate that appears while a few others have deep backlogs — its rows behind
// theirs in seq order — is published within a few claims, not after the others drain.
func TestLateAggregateNotStarvedByDeepBacklogs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("old", 5), 100) // 500 events; 10 per batch below
	sink := &memsink.Sink{}
	var once sync.Once
	var atCommit atomic.Int64 // deliveries once the late event had committed
	sink.OnPublish = func([]outbox.Message, []error) {
		once.Do(func() {
			enqueue(t, pool, []string{"late"}, 1)
			atCommit.Store(int64(sink.Count()))
		})
	}
	cfg := fastConfig()
	cfg.BatchSize, cfg.MaxPerAggregate = 50, 2
	start(t, newRelay(t, pool, sink, cfg))
	msgs := waitFor(t, sink, 30*time.Second, "the late aggregate's event", delivered("late"))
	before := 0
	for _, m := range msgs {
		if m.AggregateID == "late" {
			break
		}
		before++
	}
	// Counted from its commit (a loaded machine commits it late): the batches in flight
	// then (two workers), then at most 8 claims (relay.fullClaimEvery) of 10 events each.
	if waited := before - int(atCommit.Load()); waited > 2*10+8*10 {
		t.Fatalf("the late aggregate waited for %d events of the others after its commit", waited)
	}
	checkOrder(t, waitFor(t, sink, 30*time.Second, "everything", distinct(501)))
}

// One wake-up sets every worker of a relay with Concurrency > 1 to a backlog: a worker
// that claimed work wakes an idle peer, which claims the next batch while the first is
// being published. (A wake-up used to reach one worker; the others slept until their
// poll interval, so Concurrency did nothing after an idle spell.)
func TestOneWakeUpSetsEveryWorkerToWork(t *testing.T) {
	t.Parallel()
	const workers = 3
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	claims := &claimCounter{}
	relayPool := tracedPool(t, connString, claims)

	// Each Publish waits (up to a bound) until every worker is publishing at once.
	var inFlight, most atomic.Int32
	together := make(chan struct{})
	var once sync.Once
	sink := &memsink.Sink{OnPublish: func([]outbox.Message, []error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		if n == workers {
			once.Do(func() { close(together) })
		}
		select {
		case <-together:
		case <-time.After(time.Second):
		}
	}}
	cfg := fastConfig()
	cfg.Mode, cfg.Concurrency, cfg.BatchSize = relay.Unordered, workers, 5
	cfg.PublishCalls = 1 // a sink call in flight is a batch in flight
	cfg.Wakeup, cfg.PollInterval = relay.WakeupPoll, time.Hour
	r := newRelay(t, relayPool, sink, cfg)
	start(t, r)
	// Every worker claims once at start, finds nothing and sleeps for an hour.
	waitUntil(t, 10*time.Second, fmt.Sprintf("%d claims at start", workers), func() bool { return claims.n.Load() >= workers })

	enqueue(t, pool, aggregates("w", 30), 1)
	r.Wake()
	waitFor(t, sink, 30*time.Second, "30 events", distinct(30))
	if got := most.Load(); got != workers {
		t.Fatalf("at most %d batches were published at once after one wake-up, want %d (Concurrency)", got, workers)
	}
}

// With Concurrency unset, the relays of a schema share the default of two batches in
// flight, in both modes: a relay alone runs two at once, two relays run one each, and
// the one left runs two again once the other has stopped. Nothing is lost on the way,
// and nothing waits for a poll (there is none: only wake-ups bring workers back).
func TestDefaultConcurrencyIsSharedByRelays(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Unordered, relay.Ordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			defaultConcurrencyIsShared(t, mode)
		})
	}
}

func defaultConcurrencyIsShared(t *testing.T, mode relay.Mode) {
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	type gauge struct{ inFlight, most atomic.Int32 }
	newSink := func(g *gauge) *memsink.Sink {
		s := &memsink.Sink{OnPublish: func([]outbox.Message, []error) {
			n := g.inFlight.Add(1)
			defer g.inFlight.Add(-1)
			for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
			}
			time.Sleep(20 * time.Millisecond) //nolint:forbidigo // the sink's latency is the test's input: batches overlap
		}}
		return s
	}
	waitMost := func(g *gauge, want int32, what string) {
		t.Helper()
		waitUntil(t, 15*time.Second, what+": batches in flight", func() bool { return g.most.Load() >= want })
		if got := g.most.Load(); got != want {
			t.Fatalf("%s: at most %d batches in flight, want %d", what, got, want)
		}
	}
	cfg := fastConfig()
	cfg.Mode, cfg.BatchSize = mode, 5 // Concurrency unset: the shared default
	cfg.PublishCalls = 1              // a sink call in flight is a batch in flight
	// Only Wake brings an idle worker back: a wake-up taken by a worker that must wait
	// now (it went idle while its relay was alone) has to reach the one that works.
	cfg.Wakeup, cfg.PollInterval, cfg.LeaseTTL = relay.WakeupPoll, time.Hour, 600*time.Millisecond
	var ga, gb gauge
	sa, sb := newSink(&ga), newSink(&gb)

	waitWorkers := func(r *relay.Relay, want int) {
		t.Helper()
		waitUntil(t, 15*time.Second, fmt.Sprintf("Stats().Workers = %d", want), func() bool { return r.Stats().Workers == want })
	}

	enqueue(t, pool, aggregates("alone", 400), 1)
	ra := newRelay(t, pgtest.PoolFor(t, connString), sa, cfg)
	start(t, ra)
	ra.Wake()
	waitMost(&ga, 2, "one relay alone")
	waitWorkers(ra, 2)

	rb := newRelay(t, pgtest.PoolFor(t, connString), sb, cfg)
	stopB := start(t, rb)
	waitWorkers(ra, 1) // a heartbeat (every LeaseTTL/3) each: they count each other
	waitWorkers(rb, 1)
	// A batch started before the count changed ends before the gauges start again: the
	// first backlog is published (and committed) first.
	published := func(n int64) func() bool {
		return func() bool { return ra.Stats().Published+rb.Stats().Published >= n }
	}
	waitUntil(t, 30*time.Second, "the first backlog published", published(400))
	ga.most.Store(0)
	gb.most.Store(0) // the second relay may have run two before its first heartbeat
	enqueue(t, pool, aggregates("pair", 1000), 1)
	ra.Wake()
	rb.Wake()
	waitUntil(t, 30*time.Second, "half the second backlog published", published(400+500))
	if a, b := ga.most.Load(), gb.most.Load(); a != 1 || b != 1 {
		t.Fatalf("two relays: at most %d and %d batches in flight, want 1 each", a, b)
	}

	if err := stopB(); err != nil {
		t.Fatalf("stop the second relay: %v", err)
	}
	ga.most.Store(0)
	enqueue(t, pool, aggregates("left", 1000), 1)
	ra.Wake()
	waitMost(&ga, 2, "the relay left alone")
	waitWorkers(ra, 2)
	if !eventually(30*time.Second, func() bool { return distinctIDs(append(sa.Messages(), sb.Messages()...)) == 2400 }) {
		t.Fatalf("after 30s: %d of 2400 events; %d pending; stats %+v", distinctIDs(append(sa.Messages(), sb.Messages()...)),
			queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`), ra.Stats())
	}
}

// claimCounter counts the claim batches a pool sends (those that set the claim's jit
// setting).
type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, q := range data.Batch.QueuedQueries {
		if q.SQL == "SET LOCAL jit = off" {
			c.n.Add(1)
		}
	}
	return ctx
}
func (c *claimCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
