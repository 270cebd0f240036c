package relay_test

import (
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
)

func TestPublishesEverythingInOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("a", 20), 15)
			sink := newTestSink()
			cfg := fastConfig()
			cfg.Mode = mode
			cfg.BatchSize = 17
			start(t, newRelay(t, pool, sink, cfg))
			msgs := sink.waitFor(t, 30*time.Second, "300 events", func(m []outbox.Message) bool { return distinctIDs(m) == 300 })
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

// TESTPLAN #9: four relays in unordered mode share the backlog through SKIP LOCKED;
// no event is claimed twice at once: without faults, each is delivered exactly once.
func TestUnorderedNoDoubleClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("u", 100), 50)
	sink := newTestSink()
	cfg := fastConfig()
	cfg.Mode = relay.Unordered
	cfg.BatchSize = 25
	relays := make([]*relay.Relay, 4)
	for i := range relays {
		relays[i] = newRelay(t, pool, sink, cfg)
		start(t, relays[i])
	}
	waitSQL(t, pool, 60*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	msgs := sink.messages()
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

// MaxBatchEvents cuts an ordered batch fairly: every head first, then every aggregate's
// next event, and so on; the relay's memory stays bounded whatever BatchSize ×
// MaxPerAggregate.
func TestOrderedBatchCutByMaxBatchEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("m", 5), 10)
	sink := newTestSink()
	var (
		mu    sync.Mutex
		sizes []map[string]int // events per aggregate, per sink call
	)
	sink.onPublish = func(msgs []outbox.Message) {
		per := map[string]int{}
		for _, m := range msgs {
			per[m.AggregateID]++
		}
		mu.Lock()
		sizes = append(sizes, per)
		mu.Unlock()
	}
	cfg := fastConfig()
	cfg.BatchSize, cfg.MaxPerAggregate, cfg.MaxBatchEvents = 5, 10, 12
	start(t, newRelay(t, pool, sink, cfg))
	checkOrder(t, sink.waitFor(t, 20*time.Second, "all 50 events", func(m []outbox.Message) bool { return distinctIDs(m) == 50 }))
	mu.Lock()
	defer mu.Unlock()
	first := sizes[0]
	total := 0
	for agg, n := range first {
		total += n
		if n < 2 || n > 3 {
			t.Errorf("first batch held %d events of %s, want 2 or 3 (a fair cut of 12 over 5 aggregates)", n, agg)
		}
	}
	if total != 12 || len(first) != 5 {
		t.Fatalf("first batch: %d events over %d aggregates (%v), want 12 over 5", total, len(first), first)
	}
}

// A relay that owns fewer aggregates than BatchSize stops walking once it has found the
// heads it found last time (headHint), yet an aggregate that appears later — its rows at
// the end of the walk — is published within a few claims, not after the others drain.
func TestLateAggregateNotStarvedByHeadHint(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("old", 5), 100) // 500 events; 10 per batch below
	sink := newTestSink()
	var once sync.Once
	sink.onPublish = func([]outbox.Message) {
		once.Do(func() { enqueue(t, pool, []string{"late"}, 1) })
	}
	cfg := fastConfig()
	cfg.BatchSize, cfg.MaxPerAggregate = 50, 2
	start(t, newRelay(t, pool, sink, cfg))
	msgs := sink.waitFor(t, 30*time.Second, "the late aggregate's event", func(m []outbox.Message) bool {
		for _, x := range m {
			if x.AggregateID == "late" {
				return true
			}
		}
		return false
	})
	before := 0
	for _, m := range msgs {
		if m.AggregateID == "late" {
			break
		}
		before++
	}
	// The first batch, then at most 8 claims (relay.fullWalkEvery) of 10 events each.
	if before > 10+8*10 {
		t.Fatalf("the late aggregate waited for %d events of the others", before)
	}
	checkOrder(t, sink.waitFor(t, 30*time.Second, "everything", func(m []outbox.Message) bool { return distinctIDs(m) == 501 }))
}
