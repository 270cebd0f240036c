package relay_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// drainedRows is the backlog drained (marked published, not vacuumed) before a trickle.
const drainedRows = 150_000

// drainBacklog writes drainedRows events over 1,000 aggregates and marks them all published,
// then ANALYZE, no VACUUM (autovacuum is off on the test server, and a busy one is the
// same between its runs): the pending indexes keep an entry for each.
func drainBacklog(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for _, sql := range []string{
		fmt.Sprintf(`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
		 SELECT gen_random_uuid(), 'account', 'a' || (g %% 1000), 'e', '{}' FROM generate_series(1, %d) g`, drainedRows),
		`UPDATE outbox.events SET published_at = now()`,
		`ANALYZE outbox.events`,
	} {
		if _, err := pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// trickle enqueues one event at a time, each of its own aggregate ("trickle-N"), waits
// for each to be delivered, until done says so; it fails t after timeout, saying what
// was waited for.
func trickle(t *testing.T, pool *pgxpool.Pool, sink *memsink.Sink, timeout time.Duration, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; !done(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("a trickle of %d events over %s: still waiting for %s", i, timeout, what)
		}
		id := fmt.Sprintf("trickle-%d-%s", i, uuid.NewString()[:8])
		enqueueOne(t, pool, nil, id)
		waitFor(t, sink, 10*time.Second, "a trickle event", delivered(id))
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // the trickle's rate is the test's input
	}
}

// claimBuffers runs the claim sql with args under EXPLAIN (ANALYZE, BUFFERS), with the
// relay's claim settings, in a transaction it rolls back, and returns the shared buffers
// it hit or read.
func claimBuffers(t *testing.T, pool *pgxpool.Pool, sql string, args []any) int {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, set := range []string{"SET LOCAL jit = off", "SET LOCAL enable_seqscan = off"} { // relay/claim.go's claimSettings
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatalf("explain the claim: %v", err)
	}
	var plans []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("explain output %s: %v", out, err)
	}
	return plans[0].Plan.Hit + plans[0].Plan.Read
}

// maxTrickleBuffers bounds the pages a claim of a few rows reads after a drained backlog:
// the rows' own pages, the indexes' descents, and the dead entries of what was drained
// since the floor's last observation. Without the floor the claim reads the drained rows'
// dead entries: about 500 pages for 150,000 rows.
const maxTrickleBuffers = 200

// After a drained backlog (ANALYZE, no VACUUM), a relay under a trickle claims from its
// floor: a claim of a few rows reads a few pages, not the dead entries of every drained
// row (issue 16; docs/adr/0010-claim-floor.md). The same claim from the first row is
// measured too, and must read many more: the measure tells the two apart.
//
// Not parallel, and its modes one after the other: writing and draining the backlog
// loads the server, and the floor waits for the transactions of the tests beside it.
func TestTrickleClaimAfterDrainedBacklogReadsFewPages(t *testing.T) {
	for _, mode := range []relay.Mode{relay.Unordered, relay.Ordered} {
		t.Run(string(mode), func(t *testing.T) {
			pool := pgtest.Pool(t)
			drainBacklog(t, pool)
			sink := &memsink.Sink{}
			cfg := fastConfig()
			cfg.Mode = mode
			r := newRelay(t, pool, sink, cfg)
			stop := start(t, r)
			trickle(t, pool, sink, time.Minute, "the floor to pass the drained rows", func() bool { return relay.FloorOf(r) > drainedRows })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				enqueueOne(t, pool, nil, fmt.Sprintf("after-%d", i))
			}
			sql, args := relay.NextClaim(r, true)
			_, fullArgs := relay.NextClaim(r, false)
			// Each twice: the first claim over recently published rows kills their index
			// entries (as the relay's claims do), the second shows what every claim reads.
			claimBuffers(t, pool, sql, fullArgs)
			full := claimBuffers(t, pool, sql, fullArgs)
			claimBuffers(t, pool, sql, args)
			fromFloor := claimBuffers(t, pool, sql, args)
			t.Logf("floor %d: a claim of 5 rows read %d pages from the floor, %d from the first row", relay.FloorOf(r), fromFloor, full)
			if fromFloor > maxTrickleBuffers {
				t.Errorf("a claim of 5 rows from the floor (%d) read %d pages, want at most %d", relay.FloorOf(r), fromFloor, maxTrickleBuffers)
			}
			if full <= 2*maxTrickleBuffers {
				t.Errorf("the same claim from the first row read %d pages, want more than %d: the measure does not tell a claim that walks the drained rows from one that does not", full, 2*maxTrickleBuffers)
			}
		})
	}
}

// A transaction that took a seq and commits late, after higher seqs were published and
// the floor had every chance to pass it, is delivered promptly: the floor does not pass
// a seq a transaction still open may hold. The claims from the first row every 30 s are
// off, so nothing else could deliver it.
func TestLateCommitBelowTheFloorDelivered(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Unordered, relay.Ordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := t.Context()
			sink := &memsink.Sink{}
			cfg := fastConfig()
			cfg.Mode = mode
			r := newRelay(t, pool, sink, cfg)
			relay.NoFullClaims(r)
			start(t, r)
			trickle(t, pool, sink, time.Minute, "a floor", func() bool { return relay.FloorOf(r) > 0 })

			late, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = late.Rollback(ctx) }()
			if err := outbox.Enqueue(ctx, outbox.PgxTx(late), outbox.Event{AggregateType: "order", AggregateID: "late", EventType: "order.changed", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			var seq int64
			if err := late.QueryRow(ctx, `SELECT seq FROM outbox.events WHERE aggregate_id = 'late'`).Scan(&seq); err != nil {
				t.Fatal(err)
			}
			// Higher seqs published for well over the floor's window.
			until := time.Now().Add(3 * time.Second)
			trickle(t, pool, sink, 30*time.Second, "3 s of higher seqs", func() bool {
				if f := relay.FloorOf(r); f > seq {
					t.Fatalf("floor %d passed seq %d, held by a transaction still open", f, seq)
				}
				return time.Now().After(until)
			})
			if err := late.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			committed := time.Now()
			trickle(t, pool, sink, 10*time.Second, "the late commit's event", func() bool { return delivered("late")(sink.Messages()) })
			t.Logf("the late commit (seq %d) delivered %s after it committed; floor now %d", seq, time.Since(committed).Round(time.Millisecond), relay.FloorOf(r))
		})
	}
}

// A dead event replayed after the floor has passed it is delivered promptly: the claims
// see the replay (outbox.replays) and read from the first row until the floor accounts
// for it. The claims from the first row every 30 s are off.
func TestReplayBelowTheFloorDelivered(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Unordered, relay.Ordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			ctx := t.Context()
			var refuse atomic.Bool
			refuse.Store(true)
			errRefused := errors.New("refused")
			sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
				if m.AggregateID == "replayed" && refuse.Load() {
					return outbox.Permanent(errRefused)
				}
				return nil
			}}
			cfg := fastConfig()
			cfg.Mode = mode
			r := newRelay(t, pool, sink, cfg)
			relay.NoFullClaims(r)
			start(t, r)
			enqueueOne(t, pool, nil, "replayed")
			waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.dead_letters WHERE aggregate_id = 'replayed'`)
			var seq int64
			var id uuid.UUID
			if err := pool.QueryRow(ctx, `SELECT seq, id FROM outbox.events WHERE aggregate_id = 'replayed'`).Scan(&seq, &id); err != nil {
				t.Fatal(err)
			}
			trickle(t, pool, sink, time.Minute, "the floor to pass the dead event", func() bool { return relay.FloorOf(r) > seq })

			refuse.Store(false)
			if _, err := relay.Replay(ctx, pool, relay.Action{IDs: []uuid.UUID{id}, Actor: "test", Reason: "below the floor"}); err != nil {
				t.Fatal(err)
			}
			replayed := time.Now()
			trickle(t, pool, sink, 10*time.Second, "the replayed event", func() bool { return delivered("replayed")(sink.Messages()) })
			t.Logf("the replayed event (seq %d, below the floor) delivered %s after the replay; floor now %d", seq, time.Since(replayed).Round(time.Millisecond), relay.FloorOf(r))
		})
	}
}

// A row made pending by hand below an ordered relay's floor (out of band: nothing the
// floor can see) does not let its aggregate's later event go first: the claim that finds
// heads above the floor checks each for an earlier pending row of its aggregate, and the
// aggregate waits for the claim that reads from the first row, which delivers both in
// order.
func TestOrderedOutOfBandRowBelowTheFloorKeepsOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	sink := &memsink.Sink{}
	cfg := fastConfig()
	cfg.Mode = relay.Ordered
	r := newRelay(t, pool, sink, cfg)
	relay.NoFullClaims(r)
	start(t, r)
	enqueueOne(t, pool, nil, "oob")
	waitFor(t, sink, 10*time.Second, "the first event", delivered("oob"))
	seq := queryInt(t, pool, `SELECT seq FROM outbox.events WHERE aggregate_id = 'oob'`)
	trickle(t, pool, sink, time.Minute, "the floor to pass the first event", func() bool { return relay.FloorOf(r) > int64(seq) })

	if _, err := pool.Exec(ctx, `UPDATE outbox.events SET published_at = NULL WHERE aggregate_id = 'oob'`); err != nil {
		t.Fatal(err)
	}
	enqueueOne(t, pool, nil, "oob")
	// The trickle goes on, claimed from the floor: the aggregate's second event must wait.
	n := 0
	trickle(t, pool, sink, time.Minute, "50 events", func() bool { n++; return n > 50 })
	if got := count(sink.Messages(), func(m outbox.Message) bool { return m.AggregateID == "oob" }); got != 1 {
		t.Fatalf("%d deliveries of aggregate oob, want 1: its second event went out before the first, made pending again below the floor", got)
	}
	relay.FullClaimNow(r)
	trickle(t, pool, sink, 10*time.Second, "both of aggregate oob's events", func() bool {
		return count(sink.Messages(), func(m outbox.Message) bool { return m.AggregateID == "oob" }) >= 3
	})
	var seqs []int64
	for _, m := range sink.Messages() {
		if m.AggregateID == "oob" {
			seqs = append(seqs, m.Seq)
		}
	}
	if len(seqs) != 3 || seqs[1] != int64(seq) || seqs[2] <= seqs[1] {
		t.Fatalf("aggregate oob delivered as seqs %v, want %d, then %d again, then the later one", seqs, seq, seq)
	}
}
