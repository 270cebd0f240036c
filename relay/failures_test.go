package relay_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// queryCounter counts every statement and batch a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}
func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (q *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	q.n.Add(1)
	return ctx
}
func (q *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (q *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func countedPool(t *testing.T, connString string) (*pgxpool.Pool, *queryCounter) {
	t.Helper()
	qc := &queryCounter{}
	return tracedPool(t, connString, qc), qc
}

// tracedPool returns a pool on connString whose connections report to tracer.
func tracedPool(t *testing.T, connString string, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// S2 and the outage case: with the sink down for a while, nothing counts an attempt or
// goes dead, the breaker keeps the relay's query rate low, and the backlog drains in
// order once the sink is back. Run with the sink saying it is unavailable, and with
// plain errors across many aggregates (the relay must infer the outage); and, in both
// modes, with polls an hour apart: the sink coming back wakes nothing, so the relay must
// go back to rows a down batch returned when the breaker lets it, not at its next poll.
func TestS2SinkDownBreakerThenDrain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind string
		mode relay.Mode
		poll time.Duration
	}{
		{"unavailable", relay.Ordered, 20 * time.Millisecond},
		{"plain-errors", relay.Ordered, 20 * time.Millisecond},
		{"unavailable", relay.Ordered, time.Hour},
		{"unavailable", relay.Unordered, time.Hour},
	}
	for _, tc := range cases {
		kind := tc.kind
		t.Run(fmt.Sprintf("%s/%s/poll-%s", kind, tc.mode, tc.poll), func(t *testing.T) {
			t.Parallel()
			connString := pgtest.ConnString(t, nil)
			pool := pgtest.PoolFor(t, connString)
			enqueue(t, pool, aggregates("s", 10), 3)
			var down atomic.Bool
			down.Store(true)
			sink := &memsink.Sink{FailFunc: func(outbox.Message) error {
				if !down.Load() {
					return nil
				}
				err := errors.New("dial tcp 127.0.0.1:9092: connection refused")
				if kind == "unavailable" {
					return outbox.Unavailable(err)
				}
				return err
			}}
			relayPool, queries := countedPool(t, connString)
			cfg := fastConfig() // breaker 100 ms doubling to 400 ms
			cfg.Mode, cfg.PollInterval, cfg.FallbackPollInterval = tc.mode, tc.poll, tc.poll
			r := newRelay(t, relayPool, sink, cfg)
			stop := start(t, r)

			// Down for 2 s: without a breaker, polling every 20 ms would be ~100 batches.
			time.Sleep(2 * time.Second) //nolint:forbidigo // the outage's length is the test's input
			st := r.Stats()
			if st.BreakerOpens != 1 {
				t.Fatalf("breaker opened %d times, want 1 (it stays open across failed probes)", st.BreakerOpens)
			}
			if st.SinkDownBatches > 12 {
				t.Fatalf("%d batches tried the sink while it was down: the breaker did not hold back", st.SinkDownBatches)
			}
			if q := queries.n.Load(); q > 80 {
				t.Fatalf("relay sent %d queries in a 2 s outage, want a bounded rate (≤ 80)", q)
			}
			if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE attempts > 0 OR dead_at IS NOT NULL OR last_error IS NOT NULL`); n != 0 {
				t.Fatalf("%d events had an attempt counted or went dead during the outage", n)
			}

			down.Store(false)
			waitSQL(t, pool, 20*time.Second, 30, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
			checkOrder(t, sink.Messages())
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// partitionOf asks PostgreSQL for an aggregate's event partition.
func partitionOf(t *testing.T, pool *pgxpool.Pool, aggType, aggID string) int {
	t.Helper()
	return queryInt(t, pool, `SELECT outbox.partition_of($1, $2)`, aggType, aggID)
}

// sameAggregatePartition returns n aggregate ids (prefix + number) in the given partition.
func sameAggregatePartition(t *testing.T, pool *pgxpool.Pool, aggType, prefix string, partition, n int) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT $2 || g FROM generate_series(0, 10000000) g
		WHERE outbox.partition_of($1, $2 || g) = $3 LIMIT $4`, aggType, prefix, partition, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != n {
		t.Fatalf("aggregates in partition %d: %v, %v", partition, ids, err)
	}
	return ids
}

// S7: a poison event is retried with backoff and goes dead after its
// budget; other aggregates, also in the same partition, keep flowing; the poison's own
// later events are held until it is replayed, then published in order. With
// PublishPastDead, they flow past it instead.
func TestS7PoisonHoldsOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	for _, pastDead := range []bool{false, true} {
		t.Run(fmt.Sprintf("publish-past-dead=%v", pastDead), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			poison := "poison"
			part := partitionOf(t, pool, "order", poison)
			others := sameAggregatePartition(t, pool, "order", "n", part, 5)
			enqueue(t, pool, []string{poison}, 3) // versions 1..3
			var poisonAttempts atomic.Int32
			var healed atomic.Bool
			sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
				if m.AggregateID == poison && m.AggregateVersion == 1 && !healed.Load() {
					poisonAttempts.Add(1)
					return errors.New("broker: 503 for this message")
				}
				return nil
			}}
			cfg := fastConfig()
			cfg.MaxAttempts = 4
			if pastDead {
				cfg.PublishPastDead = []string{"order"}
			}
			start(t, newRelay(t, pool, sink, cfg))

			// While the poison is retried, other aggregates of its partition flow.
			enqueue(t, pool, others, 2)
			waitFor(t, sink, 20*time.Second, "other aggregates", counted(10, func(m outbox.Message) bool { return m.AggregateID != poison }))
			waitSQL(t, pool, 20*time.Second, 1, `SELECT count(*) FROM outbox.dead_letters WHERE aggregate_id = 'poison' AND aggregate_version = 1 AND attempts = 4 AND last_error LIKE '%503%'`)
			if poisonAttempts.Load() != 4 {
				t.Fatalf("poison tried %d times, want 4 (MaxAttempts)", poisonAttempts.Load())
			}
			// Retries were spread by backoff, not hammered.
			if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'poison' AND aggregate_version = 1 AND dead_at - created_at >= interval '60 milliseconds'`); n != 1 {
				t.Fatal("poison went dead without backing off between attempts")
			}

			// New events of other aggregates still flow after the poison is dead; the
			// poison's own later versions are held unless publishing past the dead is on.
			enqueue(t, pool, aggregates("late", 3), 1)
			waitFor(t, sink, 20*time.Second, "late aggregates", counted(3, func(m outbox.Message) bool { return strings.HasPrefix(m.AggregateID, "late") }))
			poisonLater := func(m outbox.Message) bool { return m.AggregateID == poison && m.AggregateVersion > 1 }
			if !pastDead {
				if n := count(sink.Messages(), poisonLater); n != 0 {
					t.Fatalf("%d later events of the dead poison's aggregate were published past it", n)
				}
				healed.Store(true)
				var id string
				if err := pool.QueryRow(context.Background(), `SELECT id::text FROM outbox.dead_letters`).Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids, err := relay.Replay(context.Background(), pool, relay.Action{IDs: parseIDs(t, id), Actor: "ops", Reason: "broker fixed"})
				if err != nil || len(ids) != 1 {
					t.Fatalf("replay: %v, %v", ids, err)
				}
				msgs := waitFor(t, sink, 20*time.Second, "poison's aggregate after replay", counted(3, func(m outbox.Message) bool { return m.AggregateID == poison }))
				checkOrder(t, msgs)
				if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays WHERE action = 'replay' AND actor = 'ops' AND reason = 'broker fixed'`); n != 1 {
					t.Fatal("replay not audited")
				}
			} else {
				waitFor(t, sink, 20*time.Second, "poison's later versions past the dead one", counted(2, poisonLater))
			}
		})
	}
}

// Ordering under failure: a sink that rejects 20% of first attempts at random;
// 10k events over 200 aggregates of one type and 5k over 100 of another, in ordered
// mode: first deliveries in order per aggregate. Also with the first type isolated
// (IsolatedTypes, ADR 0039): its two workers deal the partitions, a third claims the
// other type over all of them.
func TestOrderUnderRandomFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		workers  int
		isolated []string
	}{{"one-lane", 2, nil}, {"isolated-type", 3, []string{"order"}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			perAggregate := 50
			if testing.Short() {
				perAggregate = 10
			}
			enqueue(t, pool, aggregates("r", 200), perAggregate)
			execSQL(t, pool, fmt.Sprintf(`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type)
				SELECT gen_random_uuid(), 'other', 'o' || ((g - 1) %% 100), (g - 1) / 100 + 1, 'other.x' FROM generate_series(1, %d) g`, 100*perAggregate))
			total := 300 * perAggregate
			var mu sync.Mutex
			tried := map[string]bool{}
			rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // test randomness
			sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
				mu.Lock()
				defer mu.Unlock()
				first := !tried[m.ID.String()]
				tried[m.ID.String()] = true
				if first && rng.Float64() < 0.2 {
					return errors.New("transient failure")
				}
				return nil
			}}
			cfg := fastConfig()
			cfg.BreakerMinAggregates = 1000 // these are per-message failures, not an outage
			cfg.RetryBaseDelay = 5 * time.Millisecond
			cfg.RetryMaxDelay = 20 * time.Millisecond
			cfg.Concurrency, cfg.IsolatedTypes = tc.workers, tc.isolated
			r := newRelay(t, pool, sink, cfg)
			began := time.Now()
			start(t, r)
			waitSQL(t, pool, 3*time.Minute, total, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
			t.Logf("drained %d events in %s: %+v", total, time.Since(began), r.Stats())
			msgs := sink.Messages()
			if distinctIDs(msgs) != total {
				t.Fatalf("%d distinct events delivered, want %d", distinctIDs(msgs), total)
			}
			checkOrder(t, msgs)
			if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE attempts > 1`); n == 0 {
				t.Fatal("no event was retried: the failure injection did not work")
			}
		})
	}
}

// Both sides of BreakerMinAggregates: a batch in which nothing succeeded and plain
// errors span fewer aggregates than it is those messages' failure (attempts counted,
// retried with backoff, the breaker stays shut); spanning that many, it is an outage
// (nothing counted, the breaker opens).
func TestBreakerMinAggregatesBothSides(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		aggregates int
		outage     bool
	}{{1, false}, {2, false}, {3, true}, {4, true}} {
		t.Run(fmt.Sprintf("%d-aggregates", tc.aggregates), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("b", tc.aggregates), 1)
			sink := &memsink.Sink{FailFunc: func(outbox.Message) error { return errors.New("broker: 503") }}
			cfg := fastConfig()
			cfg.BreakerMinAggregates = 3
			cfg.MaxAttempts = 100
			// The threshold is judged per batch: with two batches in flight, three
			// aggregates may be claimed two and one.
			cfg.Concurrency = 1
			r := newRelay(t, pool, sink, cfg)
			start(t, r)
			if tc.outage {
				throughout(time.Second, func() { // the outage's length
					if n := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE attempts > 0`); n != 0 {
						t.Fatalf("%d events had attempts counted in an outage across %d aggregates", n, tc.aggregates)
					}
				})
				if r.Stats().BreakerOpens == 0 {
					t.Fatal("the breaker never opened")
				}
				return
			}
			waitSQL(t, pool, 5*time.Second, tc.aggregates, `SELECT count(*) FROM outbox.events WHERE attempts >= 2 AND last_error LIKE '%503%'`)
			if st := r.Stats(); st.BreakerOpens != 0 {
				t.Fatalf("failures of %d aggregates opened the breaker: %+v", tc.aggregates, st)
			}
		})
	}
}

// A batch whose connection dies (here inside its COMMIT, as in TestS3CrashWindows'
// window 4) fails, and its rows are still pending; nothing wakes the relay for them.
// With polls an hour apart, the same relay goes back to them after a short pause, not
// at its next poll — in both modes.
func TestFailedBatchIsRetriedBeforeTheNextPoll(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode relay.Mode) {
		pool := pgtest.Pool(t)
		if _, err := pool.Exec(context.Background(), stallCommitOnce); err != nil {
			t.Fatal(err)
		}
		enqueue(t, pool, aggregates("f", 5), 2)
		sink := &memsink.Sink{}
		cfg := fastConfig()
		cfg.Mode, cfg.PollInterval, cfg.FallbackPollInterval = mode, time.Hour, time.Hour
		r := newRelay(t, pool, sink, cfg)
		start(t, r)
		waitSQL(t, pool, 20*time.Second, 1, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`)
		waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep') k`)
		waitSQL(t, pool, 10*time.Second, 10, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
		if r.Stats().Errors == 0 {
			t.Fatalf("the relay saw no failed batch: stats %+v", r.Stats())
		}
	})
}
