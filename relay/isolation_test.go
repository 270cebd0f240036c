package relay_test

// One aggregate's trouble stays its own: a slow publish, a flooding aggregate type, a
// hot aggregate and a deep backlog claimed one event at a time delay nothing else. The
// assertions are about what is delivered while the trouble lasts, not about timings:
// latency figures at full scale are the benchmark's (bench/cmd/relaybench).

import (
	"context"
	"fmt"
	"slices"
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

// stallingSink delivers through a memsink, but holds the messages stall picks until
// release is closed (or the call's ctx ends), and takes perCall for every call.
type stallingSink struct {
	memsink.Sink
	stall   func(outbox.Message) bool
	perCall time.Duration
	release chan struct{}
	stalled chan struct{} // closed when the first stalled message arrives
	once    sync.Once
}

func newStallingSink(stall func(outbox.Message) bool) *stallingSink {
	return &stallingSink{stall: stall, release: make(chan struct{}), stalled: make(chan struct{})}
}

func (s *stallingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if s.perCall > 0 {
		select {
		case <-time.After(s.perCall):
		case <-ctx.Done():
		}
	}
	for _, m := range msgs {
		if s.stall != nil && s.stall(m) {
			s.once.Do(func() { close(s.stalled) })
			select {
			case <-s.release:
			case <-ctx.Done():
			}
		}
	}
	return s.Sink.Publish(ctx, msgs)
}

// deliveredOf counts the distinct events delivered whose aggregate id has prefix.
func deliveredOf(s *memsink.Sink, prefix string) int {
	seen := map[string]bool{}
	for _, m := range s.Messages() {
		if strings.HasPrefix(m.AggregateID, prefix) {
			seen[m.ID.String()] = true
		}
	}
	return len(seen)
}

// waitDelivered waits until n events of aggregates with prefix are delivered, failing t
// after timeout with why.
func waitDelivered(t *testing.T, s *memsink.Sink, prefix string, n int, timeout time.Duration, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	others := func(m outbox.Message) bool { return !strings.HasPrefix(m.AggregateID, prefix) }
	if _, err := s.WaitUntil(ctx, func(msgs []outbox.Message) bool { return distinctIDs(slices.DeleteFunc(msgs, others)) >= n }); err != nil {
		t.Fatalf("%d of %d events of %s… delivered: %s", deliveredOf(s, prefix), n, prefix, why)
	}
}

// A publish that hangs holds up its own aggregate only: while one message is held by the
// sink, the aggregates its batch published go on (the batch committed without the hung
// call), new aggregates are claimed and delivered (the relay's other batch goes on), and
// once the message goes through, its aggregate follows in order.
func TestSlowPublishHoldsOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"slow"}, 3)
	enqueue(t, pool, aggregates("mate", 20), 1) // in the slow message's batch
	sink := newStallingSink(func(m outbox.Message) bool { return m.AggregateID == "slow" && m.AggregateVersion == 1 })
	cfg := fastConfig()
	cfg.BatchTimeout = 20 * time.Second // the stall is the test's to end
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	<-sink.stalled

	// While the message is held: its batch-mates' next events, and new aggregates.
	enqueueVersions(t, pool, aggregates("mate", 20), 2, 2)
	enqueue(t, pool, aggregates("new", 20), 2)
	waitDelivered(t, &sink.Sink, "mate", 40, 15*time.Second, "the slow message's batch-mates are held up with it")
	waitDelivered(t, &sink.Sink, "new", 40, 15*time.Second, "new aggregates wait for the slow message's batch")
	if n := deliveredOf(&sink.Sink, "slow"); n != 0 {
		t.Fatalf("%d events of the slow aggregate delivered while its first was held", n)
	}
	close(sink.release)
	waitDelivered(t, &sink.Sink, "slow", 3, 15*time.Second, "the slow aggregate after its message went through")
	checkOrder(t, sink.Messages())
	waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	waitLatePublishes(t, r)
}

// waitLatePublishes waits until r counts a late publish: a late settle counts its events
// just after its transaction commits.
func waitLatePublishes(t *testing.T, r *relay.Relay) {
	t.Helper()
	if !eventually(5*time.Second, func() bool { return r.Stats().LatePublishes > 0 }) {
		t.Fatalf("no publish outlived its batch: %+v", r.Stats())
	}
}

// A batch whose every Publish call hangs — here one aggregate alone in the batch of the
// relay's only worker — holds up that aggregate only: after SlowPublish the batch goes
// on without the call, and the worker claims and publishes the aggregates written
// meanwhile. (Before, a batch went on only once some call had returned: the worker
// waited out the hung call, and every aggregate of its partitions with it.)
func TestSlowCallAloneInItsBatchHoldsOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, mode relay.Mode) {
		pool := pgtest.Pool(t)
		enqueue(t, pool, []string{"slow"}, 3)
		sink := newStallingSink(func(m outbox.Message) bool { return m.AggregateID == "slow" && m.AggregateVersion == 1 })
		cfg := fastConfig()
		cfg.Mode, cfg.Concurrency = mode, 1
		cfg.BatchTimeout = 20 * time.Second // the stall is the test's to end
		r := newRelay(t, pool, sink, cfg)
		start(t, r)
		<-sink.stalled

		enqueue(t, pool, aggregates("new", 20), 2)
		waitDelivered(t, &sink.Sink, "new", 40, 10*time.Second, "the relay's one worker waits for the hung call")
		if n := deliveredOf(&sink.Sink, "slow"); n != 0 {
			t.Fatalf("%d events of the slow aggregate delivered while its first was held", n)
		}
		close(sink.release)
		waitDelivered(t, &sink.Sink, "slow", 3, 15*time.Second, "the slow aggregate after its message went through")
		if mode == relay.Ordered {
			checkOrder(t, sink.Messages())
		}
		waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
		waitLatePublishes(t, r)
	})
}

// Calls a batch went on without settle as they return: one back a moment after the
// batch went on does not wait for one that hangs. The batch of the relay's one worker
// holds aggregate "quick" (its call takes 150 ms, past SlowPublish) and "hang" (held
// until the test releases it); both calls are left in flight, and quick's next event is
// delivered while hang's call still runs.
func TestLateCallsSettleAsTheyReturn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"quick", "hang"}, 1)
	release := make(chan struct{})
	sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		switch {
		case m.AggregateID == "quick" && m.AggregateVersion == 1:
			time.Sleep(150 * time.Millisecond) //nolint:forbidigo // the call's own time is the test's input
		case m.AggregateID == "hang":
			<-release
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.Concurrency, cfg.BatchTimeout = 1, 20*time.Second
	start(t, newRelay(t, pool, sink, cfg))
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'quick' AND published_at IS NOT NULL`)
	enqueueVersions(t, pool, []string{"quick"}, 2, 2)
	waitDelivered(t, sink, "quick", 2, 10*time.Second, "quick's next event waits for the hung call of its batch")
	close(release)
	waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
}

// A batch that went on without every call is judged as a batch only until one of its
// calls succeeds: then the sink is up, and calls that time out later failed as
// messages (an attempt counted, backoff), not as an outage. The batch of the relay's one
// worker holds "ok" (its call returns after 150 ms) and three aggregates whose calls hang
// until BatchTimeout: none has returned when the batch goes on; ok's call then shows the
// sink up.
func TestLateCallsAfterASuccessAreNotAnOutage(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"ok", "h1", "h2", "h3"}, 1)
	sink := &hangingSink{}
	sink.hang.Store(true)
	sink.FailFunc = func(m outbox.Message) error {
		if m.AggregateID == "ok" {
			time.Sleep(150 * time.Millisecond) //nolint:forbidigo // the call's own time is the test's input
		}
		return nil
	}
	sink.except = "ok"
	cfg := fastConfig()
	cfg.Concurrency, cfg.BatchTimeout = 1, 600*time.Millisecond
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	waitSQL(t, pool, 10*time.Second, 3, `SELECT count(*) FROM outbox.events WHERE aggregate_id LIKE 'h%' AND attempts = 1 AND published_at IS NULL`)
	if st := r.Stats(); st.BreakerOpens != 0 || st.SinkDownBatches != 0 {
		t.Fatalf("the hung calls after ok's success were taken for an outage: %+v", st)
	}
	sink.hang.Store(false)
	waitSQL(t, pool, 20*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
}

// hangingSink hangs every call until its context ends while hang is set — but a call of
// aggregate except — and publishes through its memsink otherwise.
type hangingSink struct {
	memsink.Sink
	hang   atomic.Bool
	except string
}

func (s *hangingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if s.hang.Load() && (s.except == "" || msgs[0].AggregateID != s.except) {
		<-ctx.Done()
	}
	return s.Sink.Publish(ctx, msgs)
}

// A sink that hangs on every call is found down, as one refusing connections is: the
// batch that went on without its hung calls (above) judges their timeouts as a batch's
// when they end — over more than BreakerMinAggregates aggregates, the sink down: no
// attempt counted, the breaker open — and everything goes out once the sink answers.
func TestSinkHangingOnEveryCallIsFoundDown(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, mode relay.Mode) {
		pool := pgtest.Pool(t)
		sink := &hangingSink{}
		sink.hang.Store(true)
		cfg := fastConfig()
		cfg.Mode, cfg.Concurrency = mode, 1
		cfg.BatchTimeout = 500 * time.Millisecond
		r := newRelay(t, pool, sink, cfg)
		start(t, r)
		enqueue(t, pool, aggregates("h", 10), 1)
		waitUntil(t, 10*time.Second, "the breaker to open", func() bool { return r.Stats().BreakerOpens > 0 })
		// The breaker's probes go on while the sink hangs: no attempt is counted for any.
		time.Sleep(time.Second) //nolint:forbidigo // the outage goes on for a while
		if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE attempts > 0 AND published_at IS NULL`); n != 0 {
			t.Fatalf("%d events had an attempt counted while the sink hung on every call", n)
		}
		sink.hang.Store(false)
		waitSQL(t, pool, 20*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	})
}

// enqueueVersions writes versions from..to of each aggregate, one transaction per version.
func enqueueVersions(t *testing.T, pool *pgxpool.Pool, aggs []string, from, to int) {
	t.Helper()
	ctx := context.Background()
	for v := from; v <= to; v++ {
		var events []outbox.Event
		for _, a := range aggs {
			events = append(events, outbox.Event{AggregateType: "order", AggregateID: a, AggregateVersion: int64(v), EventType: "order.changed"})
		}
		if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
			t.Fatal(err)
		}
	}
}

// A type flooding the table cannot hold a quiet one back: 6,000 events of type "flood"
// over 200 aggregates, then 20 of type "quiet" written after them; each claim takes an
// equal share of heads of each type, so the quiet events are all delivered while most
// of the flood still waits — where taking the oldest heads first made them wait for the
// whole flood. With one relay and with four.
func TestFloodingTypeDoesNotStarveAQuietOne(t *testing.T) {
	t.Parallel()
	for _, relays := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d-relays", relays), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := context.Background()
			if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type)
				SELECT gen_random_uuid(), 'flood', 'f' || (g % 200), 'flood.x' FROM generate_series(1, 6000) g`); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type)
				SELECT gen_random_uuid(), 'quiet', 'q' || (g % 5), 'quiet.x' FROM generate_series(1, 20) g`); err != nil {
				t.Fatal(err)
			}
			sink := newStallingSink(nil)
			sink.perCall = 10 * time.Millisecond
			cfg := fastConfig()
			cfg.BatchSize, cfg.MaxPerAggregate = 10, 1
			for range relays {
				start(t, newRelay(t, pool, sink, cfg))
			}
			waitDelivered(t, &sink.Sink, "q", 20, 30*time.Second, "the quiet type waits for the flood")
			if flood := deliveredOf(&sink.Sink, "f"); flood > 3000 {
				t.Fatalf("the quiet type's 20 events came only after %d of the flood's 6,000", flood)
			}
			t.Logf("quiet delivered after %d flood events", deliveredOf(&sink.Sink, "f"))
		})
	}
}

// A hot aggregate does not cap the heads claimed for the others: while the relay works
// through one aggregate's 1,500 events, 200 small aggregates written meanwhile are
// delivered while the hot one still has most of its backlog (each claim takes one head
// of it, and the others' turn) — where a relay that had learned "few heads" from the hot
// aggregate claimed a head or two at a time — and the hot one drains.
func TestHotAggregateDoesNotHoldTheOthers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type)
		SELECT gen_random_uuid(), 'order', 'hot', g, 'order.changed' FROM generate_series(1, 1500) g`); err != nil {
		t.Fatal(err)
	}
	sink := newStallingSink(nil)
	sink.perCall = 10 * time.Millisecond
	cfg := fastConfig()
	cfg.BatchSize, cfg.MaxPerAggregate = 20, 10
	start(t, newRelay(t, pool, sink, cfg))
	// The small aggregates come while the relay works through the hot one's backlog.
	waitDelivered(t, &sink.Sink, "hot", 100, 30*time.Second, "the hot aggregate does not start")
	enqueue(t, pool, aggregates("small", 200), 1)
	waitDelivered(t, &sink.Sink, "small", 200, 30*time.Second, "the small aggregates wait for the hot one")
	if hot := deliveredOf(&sink.Sink, "hot"); hot > 220 {
		t.Fatalf("the small aggregates came only after %d of the hot aggregate's 1,500", hot)
	}
	t.Logf("the small aggregates delivered after %d of the hot aggregate's events", deliveredOf(&sink.Sink, "hot"))
	waitDelivered(t, &sink.Sink, "hot", 1500, 120*time.Second, "the hot aggregate does not drain")
	checkOrder(t, sink.Messages())
}

// MaxPerAggregate 1 on one aggregate's backlog: each claim takes the head alone, and
// finding it costs one index descent, not a walk of the backlog (which made 5–7 events a
// second of a 10,000-event backlog). 2,000 events drain in well under 20 s.
func TestOneEventPerClaimDoesNotWalkTheBacklog(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type)
		SELECT gen_random_uuid(), 'order', 'deep', g, 'order.changed' FROM generate_series(1, 2000) g`); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	sink := &memsink.Sink{FailFunc: func(outbox.Message) error { calls.Add(1); return nil }}
	cfg := fastConfig()
	cfg.MaxPerAggregate = 1
	began := time.Now()
	start(t, newRelay(t, pool, sink, cfg))
	waitSQL(t, pool, 20*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
	t.Logf("2,000 events, one per claim, in %s (%.0f events/s)", time.Since(began).Round(time.Millisecond), 2000/time.Since(began).Seconds())
	checkOrder(t, sink.Messages())
}

// A claim that one type's share cut short is not a relay that has caught up: a backlog
// of 2,000 single-event aggregates of one type, beside one event of another, drains
// without waiting for a wake-up or a poll (both an hour away here). A claim that took
// its share of one type and the other type's one head used to count as "took what
// there was", and the worker waited for the next wake-up with the backlog still there.
func TestClaimCutByTypeSharesIsNotCaughtUp(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	execSQL(t, pool, floodAndQuiet(2000)...)
	cfg := fastConfig()
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	start(t, newRelay(t, pool, &memsink.Sink{}, cfg))
	waitSQL(t, pool, 20*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
}

// callsSink publishes through its memsink and records, per Publish call, how many
// distinct aggregates of each type it held.
type callsSink struct {
	memsink.Sink
	mu    sync.Mutex
	calls []map[string]int
}

func (s *callsSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	heads := map[string]int{}
	seen := map[string]bool{}
	for _, m := range msgs {
		if k := m.AggregateType + "/" + m.AggregateID; !seen[k] {
			seen[k] = true
			heads[m.AggregateType]++
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, heads)
	s.mu.Unlock()
	return s.Sink.Publish(ctx, msgs)
}

// A type's share of a claim's heads follows what the types need and their weights:
// a type that needs one head leaves the rest of its share to a flooding one (claims of
// 100 heads, not 51), and two flooding types split the heads 3 to 1 when one weighs 3.
func TestTypeSharesFollowNeedAndWeights(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, weights map[string]int, fill ...string) []map[string]int {
		pool := pgtest.Pool(t)
		execSQL(t, pool, fill...)
		cfg := fastConfig()
		cfg.Concurrency, cfg.PublishCalls, cfg.TypeWeights = 1, 1, weights // one batch at a time, one call each
		sink := &callsSink{}
		start(t, newRelay(t, pool, sink, cfg))
		waitSQL(t, pool, 30*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return slices.Clone(sink.calls)
	}
	t.Run("need", func(t *testing.T) {
		t.Parallel()
		calls := run(t, nil,
			`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) SELECT gen_random_uuid(), 'flood', 'f' || g, 'x' FROM generate_series(1, 1000) g`,
			`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) SELECT gen_random_uuid(), 'quiet', 'q', 'x' FROM generate_series(1, 300) g`)
		// The batches while both types wait, after the first (equal shares: 50 + 1).
		var both []int
		for _, c := range calls[1:] {
			if c["flood"] > 0 && c["quiet"] > 0 {
				both = append(both, c["flood"]+c["quiet"])
			}
		}
		// (the last of them holds what was left of the flood)
		if len(both) < 3 || slices.Min(both[:len(both)-1]) < 90 {
			t.Fatalf("batches holding both types had %v heads (want 90 or more from the second on): %v", both, calls)
		}
	})
	t.Run("weights", func(t *testing.T) {
		t.Parallel()
		calls := run(t, map[string]int{"pay": 3},
			`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN 'pay' ELSE 'mail' END, 'a' || g, 'x' FROM generate_series(1, 2000) g`)
		pay, mail := 0, 0
		for _, c := range calls[1:] {
			if c["pay"] > 0 && c["mail"] > 0 {
				pay, mail = pay+c["pay"], mail+c["mail"]
			}
		}
		if mail == 0 || float64(pay)/float64(mail) < 2.5 || float64(pay)/float64(mail) > 3.5 {
			t.Fatalf("pay %d heads, mail %d while both waited (want 3 to 1): %v", pay, mail, calls)
		}
	})
}

// typeMixSink counts the Publish calls that carry events of an isolated type beside
// events of another.
type typeMixSink struct {
	*stallingSink
	isolated string
	mixed    atomic.Int32
}

func (s *typeMixSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	iso := 0
	for _, m := range msgs {
		if m.AggregateType == s.isolated {
			iso++
		}
	}
	if iso > 0 && iso < len(msgs) {
		s.mixed.Add(1)
	}
	return s.stallingSink.Publish(ctx, msgs)
}

// An isolated type has workers of its own (Config.IsolatedTypes, ADR 0039): while its
// Publish call is held, the other types' events are claimed and published by the other
// lane, over every partition, and no call mixes the two. Without lanes, the worker that
// holds the call was dealt half the partitions, and the quiet events there waited for
// it (and its claims took them beside the bulk ones).
func TestIsolatedTypeHasWorkersOfItsOwn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &typeMixSink{stallingSink: newStallingSink(func(m outbox.Message) bool { return m.AggregateType == "bulk" }), isolated: "bulk"}
	cfg := fastConfig()
	cfg.Concurrency, cfg.IsolatedTypes = 2, []string{"bulk"}
	cfg.SlowPublish = time.Minute // a batch waits for its held call: only the other lane goes on
	start(t, newRelay(t, pool, sink, cfg))
	execSQL(t, pool, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type)
		SELECT gen_random_uuid(), 'bulk', 'b' || ((g - 1) % 10), (g - 1) / 10 + 1, 'bulk.x' FROM generate_series(1, 200) g`)
	select {
	case <-sink.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("no bulk event reached the sink")
	}
	execSQL(t, pool, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type)
		SELECT gen_random_uuid(), 'quiet', 'q' || g, 1, 'quiet.x' FROM generate_series(1, 20) g`)
	waitDelivered(t, &sink.Sink, "q", 20, 10*time.Second, "the quiet type waits for the bulk type's held call")
	if n := deliveredOf(&sink.Sink, "b"); n != 0 {
		t.Fatalf("%d bulk events delivered while their call was held", n)
	}
	close(sink.release)
	waitDelivered(t, &sink.Sink, "b", 200, 30*time.Second, "the bulk type does not drain")
	if n := sink.mixed.Load(); n > 0 {
		t.Errorf("%d Publish calls mixed the bulk type with another", n)
	}
	checkOrder(t, sink.Messages())
}
