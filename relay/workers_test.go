package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// gateSink holds its first Publish call until a second one starts (or hold has passed),
// and records each call's aggregates.
type gateSink struct {
	memsink.Sink
	hold time.Duration

	mu          sync.Mutex
	calls       [][]aggregateKey
	second      chan struct{} // closed when the second call starts
	firstOver   bool          // the first call had returned when the second started
	firstReturn bool
}

func (s *gateSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	var keys []aggregateKey
	for _, m := range msgs {
		keys = append(keys, keyOf(m))
	}
	s.mu.Lock()
	s.calls = append(s.calls, keys)
	n := len(s.calls)
	if n == 2 {
		s.firstOver = s.firstReturn
		close(s.second)
	}
	s.mu.Unlock()
	if n == 1 {
		select {
		case <-s.second:
		case <-time.After(s.hold):
		case <-ctx.Done():
		}
		defer func() { s.mu.Lock(); s.firstReturn = true; s.mu.Unlock() }()
	}
	return s.Sink.Publish(ctx, msgs)
}

// An ordered relay's two batches in flight claim different aggregates: while one is being
// published, the other claims the rest of the backlog. Claiming from the same partitions,
// the second claim took the same heads as the first, found them locked, and came back
// empty (and, once the first had committed, spent seconds re-checking each of them) —
// with fewer aggregates than a claim's heads, the relay ran one batch at a time.
func TestOrderedWorkersClaimDifferentAggregates(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("w", 40), 5)
	sink := &gateSink{hold: 15 * time.Second, second: make(chan struct{})}
	cfg := fastConfig()
	cfg.Mode = relay.Ordered
	cfg.BatchSize = 100  // more heads than aggregates: one claim could take them all
	cfg.PublishCalls = 1 // a batch is one call: a second call is a second batch
	cfg.SlowPublish = time.Minute
	cfg.BatchTimeout = time.Minute
	r := newRelay(t, pool, sink, cfg)
	if got := r.Stats().Workers; got != 2 {
		t.Fatalf("Workers = %d, want the ordered default 2", got)
	}
	start(t, r)
	select {
	case <-sink.second:
	case <-time.After(sink.hold):
		t.Fatal("no second batch was published while the first was held")
	}
	msgs := waitFor(t, &sink.Sink, 30*time.Second, "every event", counted(200, func(outbox.Message) bool { return true }))
	checkOrder(t, msgs)

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.firstOver {
		t.Fatal("the second batch started only after the first returned")
	}
	first := map[aggregateKey]bool{}
	for _, k := range sink.calls[0] {
		first[k] = true
	}
	for _, k := range sink.calls[1] {
		if first[k] {
			t.Fatalf("aggregate %s is in both batches in flight", k)
		}
	}
}

// A wake-up reaches the ordered worker whose partitions hold the new event: each of the
// relay's workers claims from its own share of the partitions, so a wake-up taken by the
// other one alone would leave the event for the next fallback poll (an hour here).
func TestOrderedWakeUpReachesEveryWorker(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	_, n := startWokenOnly(t, pool, sink)
	for i := range 12 { // aggregates hash to partitions of both workers
		id := fmt.Sprintf("woken-%d", i)
		enqueueOne(t, pool, n, id)
		waitFor(t, sink, wakeDeadline, id, delivered(id))
	}
}

// Under a trickle, a wake-up costs about one claim transaction, not one per worker: each
// ordered worker is woken (either may hold the new event's partition), and the ones with
// nothing new in their share find that out with the read-only probe. Claiming at once,
// both workers ran a write transaction per event (1.91 claims per event at 500 events/s).
func TestOrderedTrickleClaimsOncePerWakeUp(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r, n := startWokenOnly(t, pool, sink)
	enqueueOne(t, pool, n, "first")
	waitFor(t, sink, wakeDeadline, "first", delivered("first"))
	time.Sleep(100 * time.Millisecond) // the start's and the first event's claims are done
	before := r.Stats().Claims
	const events = 20
	for i := range events {
		id := fmt.Sprintf("trickle-%d", i)
		enqueueOne(t, pool, n, id)
		waitFor(t, sink, wakeDeadline, id, delivered(id))
		time.Sleep(20 * time.Millisecond) // the other worker's probe has answered
	}
	if claims := r.Stats().Claims - before; claims > events*3/2 {
		t.Fatalf("%d claim transactions for %d events delivered one at a time, want at most %d", claims, events, events*3/2)
	}
}

// startWokenOnly starts an ordered relay of the default two workers that listens for
// wake-ups and polls only once an hour, and returns it with a Notifier on pool.
func startWokenOnly(t *testing.T, pool *pgxpool.Pool, sink outbox.Sink) (*relay.Relay, *outbox.Notifier) {
	t.Helper()
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = "" // the default: listen
	r := newRelay(t, pool, sink, cfg)
	if got := r.Stats().Workers; got != 2 {
		t.Fatalf("Workers = %d, want the ordered default 2", got)
	}
	start(t, r)
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	return r, newNotifier(t, pool)
}
