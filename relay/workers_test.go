package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
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

// gateSink holds its Publish call number held+1 (the first, by default) until another
// one starts (the "second") or hold has passed, and records each call's aggregates.
type gateSink struct {
	memsink.Sink
	hold time.Duration
	held int // calls let through before the one held

	mu          sync.Mutex
	calls       [][]aggregateKey
	second      chan struct{} // closed when the call after the held one starts
	firstOver   bool          // the held call had returned when the next started
	firstReturn bool
}

func (s *gateSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	var keys []aggregateKey
	for _, m := range msgs {
		keys = append(keys, keyOf(m))
	}
	s.mu.Lock()
	s.calls = append(s.calls, keys)
	n := len(s.calls) - s.held
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
// with fewer aggregates than a claim's heads, the relay ran one batch at a time. With the
// default Concurrency the second worker joins once the relay is busy (ADR 0035). A relay
// started on a backlog claims its first batch before it knows: over every partition, so
// the two in flight are the batches after it (one is let through). A relay woken on a
// backlog learns it from its probe, and both workers claim from the first batch on: a
// first claim over every partition held them all from the second worker until it ended.
func TestOrderedWorkersClaimDifferentAggregates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                                     string
		aggregates, batchSize, concurrency, held int
		woken, afterTrickle                      bool
	}{
		{"Concurrency 2", 40, 100, 2, 0, false, false}, // more heads than aggregates: one claim could take them all
		// more aggregates in each worker's share than a claim takes: each worker claims twice
		{"the default, started on a backlog", 100, 20, 0, 1, false, false},
		{"the default, woken on a backlog", 100, 20, 0, 0, true, false},
		// woken while following a trickle, the one worker claims without a probe (ADR 0035's
		// amendment): its claim over every partition holds them from the second worker until
		// the batch goes on without its slow call (SlowPublish, the default here)
		{"the default, a backlog after a trickle", 100, 20, 0, 1, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			orderedWorkersClaimDifferentAggregates(t, tc.aggregates, tc.batchSize, tc.concurrency, tc.held, tc.woken, tc.afterTrickle)
		})
	}
}

func orderedWorkersClaimDifferentAggregates(t *testing.T, n, batchSize, concurrency, held int, woken, afterTrickle bool) {
	pool := pgtest.Pool(t)
	if !woken {
		enqueue(t, pool, aggregates("w", n), 5)
	}
	sink := &gateSink{hold: 15 * time.Second, held: held, second: make(chan struct{})}
	cfg := fastConfig()
	cfg.Mode = relay.Ordered
	cfg.BatchSize = batchSize
	cfg.PublishCalls = 1 // a batch is one call: a second call is a second batch
	if !afterTrickle {
		cfg.SlowPublish = time.Minute
	}
	cfg.BatchTimeout = time.Minute
	cfg.Concurrency = concurrency
	if woken {
		cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	}
	r := newRelay(t, pool, sink, cfg)
	if got := r.Stats().Workers; got != 2 {
		t.Fatalf("Workers = %d, want 2", got)
	}
	start(t, r)
	if woken {
		waitSQL(t, pool, 10*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
		time.Sleep(100 * time.Millisecond) // the start's claims and probes are done: idle
		if afterTrickle {                  // one event, published (the call let through): the relay caught up
			enqueue(t, pool, []string{"trickle"}, 1)
			r.Wake()
			waitFor(t, &sink.Sink, wakeDeadline, "the trickle's event", delivered("trickle"))
		}
		enqueue(t, pool, aggregates("w", n), 5)
		r.Wake()
	}
	select {
	case <-sink.second:
	case <-time.After(sink.hold):
		t.Fatal("no second batch was published while the first was held")
	}
	msgs := waitFor(t, &sink.Sink, 30*time.Second, "every event", counted(n*5, func(m outbox.Message) bool { return m.AggregateID != "trickle" }))
	checkOrder(t, msgs)

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.firstOver {
		t.Fatal("the second batch started only after the first returned")
	}
	first := map[aggregateKey]bool{}
	for _, k := range sink.calls[held] {
		first[k] = true
	}
	for _, k := range sink.calls[held+1] {
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

// startWokenOnly starts an ordered relay of two workers that listens for
// wake-ups and polls only once an hour, and returns it with a Notifier on pool.
func startWokenOnly(t *testing.T, pool *pgxpool.Pool, sink outbox.Sink) (*relay.Relay, *outbox.Notifier) {
	t.Helper()
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = ""     // the default: listen
	cfg.Concurrency = 2 // two workers whether busy or not (ADR 0035)
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	return r, newNotifier(t, pool)
}

// An ordered relay that is not busy claims with one worker (ADR 0035). Each of its
// workers claims from its own share of the partitions and each is woken, so a trickle
// whose commits land in both shares cost a claim transaction per worker: events written
// two at a time, one in each share, took two claims a pair. One worker claiming for the
// whole relay takes both in one claim. The relay starts busy (a backlog larger than a
// claim brings the second worker in, and both drain it) and claims with one worker again
// once no claim has come back full for a second.
func TestOrderedRelayNotBusyClaimsWithOneWorker(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	enqueue(t, pool, aggregates("busy", 60), 1)
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.BatchSize = 10 // the backlog takes full claims
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = "" // the default: listen
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	waitFor(t, sink, 30*time.Second, "the backlog", counted(60, func(outbox.Message) bool { return true }))
	if got := r.Stats().Workers; got != 2 {
		t.Fatalf("Workers = %d, want the ordered default 2", got)
	}
	time.Sleep(1500 * time.Millisecond) // no full claim for longer than the relay stays busy

	// aggregate ids in the shares of worker 0 and worker 1: the relay leases all 16
	// partitions, dealt out by position (even ones to worker 0)
	var inShare [2][]string
	for i := 0; len(inShare[0]) < 10 || len(inShare[1]) < 10; i++ {
		id := fmt.Sprintf("pair-%d", i)
		p := queryInt(t, pool, "SELECT outbox.partition_of('order', $1)", id)
		w := p * 16 / 4096 % 2
		inShare[w] = append(inShare[w], id)
	}
	n := newNotifier(t, pool)
	before := r.Stats().Claims
	const pairs = 10
	for i := range pairs {
		ids := []string{inShare[0][i], inShare[1][i]}
		err := outbox.WithTx(t.Context(), pool, func(tx pgx.Tx) error {
			for _, id := range ids {
				if err := outbox.Enqueue(t.Context(), outbox.PgxTx(tx), outbox.Event{
					AggregateType: "order", AggregateID: id, EventType: "order.changed", Payload: []byte(`{}`),
				}); err != nil {
					return err
				}
			}
			return nil
		}, n.AfterCommit)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			waitFor(t, sink, wakeDeadline, id, delivered(id))
		}
		time.Sleep(20 * time.Millisecond) // every probe has answered
	}
	if claims := r.Stats().Claims - before; claims > pairs*3/2 {
		t.Fatalf("%d claim transactions for %d pairs of events, one in each worker's share, want at most %d", claims, pairs, pairs*3/2)
	}
}

// An ordered relay that keeps up with a flood claims with one worker. Each commit of the
// flood takes a full claim and one that catches up, moments later; the second worker
// would only split the partitions and share the CPU the claims wait for (ADR 0037). It
// was brought in by every full claim: the relay claimed with both through the whole
// flood. (In the relaybench flood, one relay: p50 5.35–5.63 ms with both, 2.57–3.02 with
// one.)
func TestOrderedRelayKeepingUpWithAFloodClaimsWithOneWorker(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.BatchSize = 10 // a commit of 15 aggregates takes a full claim, then one that catches up
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = "" // the default: listen
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	n := newNotifier(t, pool)
	write := func(prefix string, events int) {
		t.Helper()
		if err := outbox.WithTx(t.Context(), pool, func(tx pgx.Tx) error {
			for i := range events {
				if err := outbox.Enqueue(t.Context(), outbox.PgxTx(tx), outbox.Event{
					AggregateType: "flood", AggregateID: fmt.Sprintf("%s-%d", prefix, i), EventType: "flood.changed", Payload: []byte(`{}`),
				}); err != nil {
					return err
				}
			}
			return nil
		}, n.AfterCommit); err != nil {
			t.Fatal(err)
		}
	}
	write("first", 1) // the relay catches up: it follows what comes next
	waitFor(t, sink, wakeDeadline, "the first event", delivered("first-0"))
	if got := r.Stats().Workers; got != 2 {
		t.Fatalf("Workers = %d, want the ordered default 2", got)
	}

	stopSampling := sampleActiveWorkers(r, func(active int) bool { return active > 1 })
	claimsBefore := r.Stats().Claims
	const commits, perCommit = 40, 15
	for i := range commits {
		write(fmt.Sprintf("flood%d", i), perCommit)
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, sink, 30*time.Second, "the flood", counted(commits*perCommit, func(m outbox.Message) bool {
		return m.AggregateType == "flood" && !strings.HasPrefix(m.AggregateID, "first")
	}))
	busy, samples := stopSampling()
	if claims := r.Stats().Claims - claimsBefore; claims < 2*commits {
		t.Fatalf("%d claims for %d commits of %d events at BatchSize %d: the flood took no full claims", claims, commits, perCommit, cfg.BatchSize)
	}
	if busy*4 > samples {
		t.Fatalf("the relay claimed with both workers in %d of %d samples of a flood it kept up with, want at most a quarter", busy, samples)
	}

	// A backlog one worker does not catch up with, 200 full claims, brings the second in.
	write("backlog", 2000)
	waitUntil(t, 10*time.Second, "both workers to claim the backlog", func() bool { return r.Stats().ActiveWorkers == 2 })
	waitFor(t, sink, 30*time.Second, "the backlog", counted(2000, func(m outbox.Message) bool { return strings.HasPrefix(m.AggregateID, "backlog-") }))
}

// A claim that cuts an aggregate (more of it waits) makes a relay that follows a trickle
// busy at once, before its batch is published: the second worker keeps the other
// aggregates going beside that aggregate's batches and a slow call in one. (With the
// grace of ADR 0037 applied to it, the relay claimed a hot aggregate with one worker for
// 100 ms, and a message the sink held in that time held every aggregate for SlowPublish:
// the trickle's p99 beside a stalled hot aggregate went from 12–25 ms to 32–39.)
func TestOrderedRelayBusyAtOnceForADeepAggregate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = "" // the default: listen
	r := newRelay(t, pool, sink, cfg)
	var atFirstDeep atomic.Int64 // the relay's active workers when the deep aggregate's first message is published
	sink.FailFunc = func(m outbox.Message) error {
		if m.AggregateID == "deep" {
			atFirstDeep.CompareAndSwap(0, int64(r.Stats().ActiveWorkers))
		}
		return nil
	}
	start(t, r)
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	n := newNotifier(t, pool)
	enqueueOne(t, pool, n, "first")
	waitFor(t, sink, wakeDeadline, "the first event", delivered("first"))
	enqueueOne(t, pool, n, "second") // the relay follows a trickle: caught up a moment ago
	waitFor(t, sink, wakeDeadline, "the second event", delivered("second"))
	if got := r.Stats().ActiveWorkers; got != 1 {
		t.Fatalf("ActiveWorkers = %d following a trickle, want 1", got)
	}
	deep := make([]outbox.Event, 100) // ten claims' worth at the default MaxPerAggregate
	for i := range deep {
		deep[i] = outbox.Event{AggregateType: "order", AggregateID: "deep", EventType: "order.changed", Payload: []byte(`{}`)}
	}
	if err := outbox.WithTx(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(t.Context(), outbox.PgxTx(tx), deep...)
	}, n.AfterCommit); err != nil {
		t.Fatal(err)
	}
	waitFor(t, sink, 10*time.Second, "the deep aggregate", counted(len(deep), func(m outbox.Message) bool { return m.AggregateID == "deep" }))
	if got := atFirstDeep.Load(); got != 2 {
		t.Fatalf("ActiveWorkers = %d when the deep aggregate's first batch was published, want 2", got)
	}
}

// A worker that stays behind keeps its relay busy while the other worker follows a
// trickle in its own share, catching up at every claim. (When the relay's last catch-up,
// not the worker's, decided, the trickle's claims stopped the backlog's full claims from
// renewing the busy mark: the relay fell back to one worker every second, and each time
// 100 ms passed before it was busy again.)
func TestOrderedWorkerBehindKeepsTheRelayBusy(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.BatchSize = 5 // the backlog takes 2,400 claims of one event per aggregate, each full
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = "" // the default: listen
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })

	// aggregate ids in each worker's share: the relay leases all 16 partitions, dealt out
	// by position (even ones to worker 0)
	inShare := func(share, n int, prefix string) []string {
		return queryStrings(t, pool, `SELECT id FROM (SELECT $3 || g AS id FROM generate_series(1, 100000) g) ids
			WHERE outbox.partition_of('order', id) * 16 / 4096 % 2 = $1 LIMIT $2`, share, n, prefix)
	}
	backlog, trickle := inShare(0, 12000, "backlog-"), inShare(1, 200, "trickle-")
	enqueue(t, pool, backlog, 1)
	r.Wake()
	waitUntil(t, 10*time.Second, "both workers to claim the backlog", func() bool { return r.Stats().ActiveWorkers == 2 })

	stopSampling := sampleActiveWorkers(r, func(active int) bool { return active < 2 })
	n := newNotifier(t, pool)
	drained := counted(len(backlog), func(m outbox.Message) bool { return strings.HasPrefix(m.AggregateID, "backlog-") })
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; !drained(sink.Messages()); i++ {
		if time.Now().After(deadline) {
			t.Fatal("the backlog did not drain in 60 s")
		}
		enqueueOne(t, pool, n, trickle[i%len(trickle)])
		time.Sleep(20 * time.Millisecond)
	}
	if one, samples := stopSampling(); one*100 > samples {
		t.Fatalf("the relay claimed with one worker in %d of %d samples while a worker was behind, want at most 1 in 100", one, samples)
	}
}

// sampleActiveWorkers samples r's active workers every millisecond until the returned stop
// is called, which returns how many samples matched and how many were taken.
func sampleActiveWorkers(r *relay.Relay, match func(active int) bool) (stop func() (matched, samples int64)) {
	var n, hits int64
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			n++
			if match(r.Stats().ActiveWorkers) {
				hits++
			}
		}
	}()
	return func() (int64, int64) {
		close(done)
		<-sampled
		return hits, n
	}
}

// probeCounter counts the relay's probes (probe.sql) on the connections it traces.
type probeCounter struct{ n atomic.Int64 }

func (c *probeCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(data.SQL, "-- probe:") {
		c.n.Add(1)
	}
	return ctx
}
func (c *probeCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A relay that shares the schema's partitions with another is woken for the other's
// events too. Following a trickle, it claimed at every one of those wake-ups and found
// nothing: with four relays, three empty claims an event. After a look that found nothing
// it probes first, until a look finds events: an empty claim after each of its own events
// at most.
func TestOrderedRelayProbesAfterAWakeupForAnotherRelaysEvents(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = "" // the default: listen
	sinks := []*memsink.Sink{{}, {}}
	var relays []*relay.Relay
	for _, s := range sinks {
		r := newRelay(t, pgtest.PoolFor(t, connString), s, cfg)
		start(t, r)
		relays = append(relays, r)
	}
	for _, r := range relays {
		waitSQL(t, pool, 20*time.Second, 8, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
		waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	}
	// aggregates in each relay's partitions
	idsOf := func(r *relay.Relay) []string {
		t.Helper()
		return queryStrings(t, pool, `SELECT 'o' || g FROM generate_series(1, 100000) g
			WHERE outbox.partition_of('order', 'o' || g) * 16 / 4096 = ANY(ARRAY(SELECT partition FROM outbox.leases WHERE owner = $1))
			LIMIT 40`, r.Owner())
	}
	mine, theirs := idsOf(relays[1]), idsOf(relays[0])
	n := newNotifier(t, pool)
	write := func(id string) {
		t.Helper()
		enqueueWoken(t, pool, n, id)
		waitUntil(t, wakeDeadline, id+" delivered", func() bool {
			return delivered(id)(sinks[0].Messages()) || delivered(id)(sinks[1].Messages())
		})
		time.Sleep(20 * time.Millisecond) // a trickle: the relays caught up a moment ago
	}
	claimsBefore := relays[1].Stats().Claims
	const own, every = 5, 8 // the second relay's events, one in every 8
	for i := range own * every {
		if i%every == 0 {
			write(mine[i/every])
		} else {
			write(theirs[i])
		}
	}
	claims := relays[1].Stats().Claims - claimsBefore
	t.Logf("the second relay: %d claims over %d wake-ups, %d for its own events", claims, own*every, own)
	// its own events, and one empty claim after each at most (the first wake-up for the
	// other relay's events still finds it following)
	if claims > 2*own+2 {
		t.Fatalf("the second relay made %d claims over %d wake-ups, %d of them for its own events: want at most %d", claims, own*every, own, 2*own+2)
	}
}

// An ordered relay following a trickle claims at each wake-up without probing first: its
// one worker claims for the whole relay, and the wake-up is for events it will take. (It
// probed before every claim, two statements a wake-up where one does: at 500 events/s,
// p99 7.04–7.58 ms against 6.68–7.10 without the probe.)
func TestOrderedRelayFollowingATrickleClaimsWithoutProbing(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	probes := &probeCounter{}
	sink := &memsink.Sink{}
	cfg := slowPollConfig()
	cfg.Mode = relay.Ordered
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	cfg.Wakeup = "" // the default: listen
	r := newRelay(t, tracedPool(t, connString, probes), sink, cfg)
	start(t, r)
	waitSQL(t, pool, 20*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	n := newNotifier(t, pool)
	write := func(id string) {
		t.Helper()
		enqueueWoken(t, pool, n, id)
		waitFor(t, sink, wakeDeadline, id, delivered(id))
	}
	write("first") // after an idle spell: probed
	probesBefore, claimsBefore := probes.n.Load(), r.Stats().Claims
	const events = 20
	for i := range events {
		time.Sleep(20 * time.Millisecond) // a trickle: the relay caught up a moment ago
		write(fmt.Sprintf("trickle-%d", i))
	}
	claims, probed := r.Stats().Claims-claimsBefore, probes.n.Load()-probesBefore
	if claims < events {
		t.Fatalf("%d claims for %d events written one at a time", claims, events)
	}
	if probed > events/4 {
		t.Fatalf("%d probes beside %d claims for a trickle of %d events, want at most %d", probed, claims, events, events/4)
	}
}

// enqueueWoken commits one event of aggregate order/id and wakes the relays with n, as a
// service does.
func enqueueWoken(t *testing.T, pool *pgxpool.Pool, n *outbox.Notifier, id string) {
	t.Helper()
	if err := outbox.WithTx(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(t.Context(), outbox.PgxTx(tx), outbox.Event{
			AggregateType: "order", AggregateID: id, EventType: "order.changed", Payload: []byte(`{}`),
		})
	}, n.AfterCommit); err != nil {
		t.Fatal(err)
	}
}

// queryStrings returns the first column of sql's rows, as text.
func queryStrings(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return values
}
