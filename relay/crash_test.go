package relay_test

// Tests that arm failpoints. Failpoints are process-wide, so these tests do not call
// t.Parallel: Go runs them before any parallel test of the package starts.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/failpoint"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// S3: a crash in each of the four windows of a batch. Window 1 (after
// claim, before publish) publishes nothing extra; windows 2–4 publish each event of the
// batch exactly once more, with the same id: 2, after the broker has the messages but
// before the relay sees its answer (failpoint AfterPublish); 3, after the acks are seen,
// before the round trip that writes the outcomes (BeforeMark); 4, inside that round
// trip — the claim's mark (or delete) and the put-back have run, the COMMIT has not
// finished: a deferred trigger stalls the COMMIT and the test terminates the relay's
// backend, as a database crash or a cut connection would. In ordered mode, and in
// unordered mode, whose claim marks (keep modes) or deletes (delete-on-publish) the
// batch before the sink has it.
func TestS3CrashWindows(t *testing.T) {
	modes := []struct {
		name      string
		mode      relay.Mode
		retention relay.RetentionMode
	}{
		{"ordered", relay.Ordered, relay.KeepThenDelete},
		{"unordered", relay.Unordered, relay.KeepThenDelete},
		{"unordered-delete", relay.Unordered, relay.DeleteOnPublish},
	}
	windows := []struct {
		point string
		extra int // extra deliveries per event
	}{
		{failpoint.AfterClaim, 0},
		{failpoint.AfterPublish, 1},
		{failpoint.BeforeMark, 1},
		{inCommit, 1},
	}
	for _, m := range modes {
		for _, w := range windows {
			t.Run(m.name+"/"+w.point, func(t *testing.T) {
				cfg := func() *relay.Config {
					c := fastConfig()
					c.Mode, c.Retention.Mode = m.mode, m.retention
					// One batch in flight: a simulated crash stops the worker it hits, and a
					// second worker would go on claiming until Run returns, as no real crash does.
					c.Concurrency = 1
					return c
				}
				crashInWindow(t, cfg, w.point, w.extra)
			})
		}
	}
}

// inCommit names window 4 of TestS3CrashWindows: the connection dies inside the round
// trip that commits the batch.
const inCommit = "in-commit"

// stallCommitOnce makes the first COMMIT of a transaction that changed outbox.events
// stall (a deferred constraint trigger; the sequence that says "first" is not
// transactional, so the rollback does not reset it).
const stallCommitOnce = `
CREATE SEQUENCE stall_commits;
CREATE FUNCTION stall_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF nextval('stall_commits') = 1 THEN
		PERFORM pg_sleep(60);
	END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER stall_commit AFTER UPDATE OR DELETE ON outbox.events
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION stall_commit()`

func crashInWindow(t *testing.T, config func() *relay.Config, point string, extra int) {
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("c", 5), 2) // 10 events, one batch
	sink := &memsink.Sink{}

	crashedBatch := 0
	if point == inCommit {
		if _, err := pool.Exec(context.Background(), stallCommitOnce); err != nil {
			t.Fatal(err)
		}
		r := newRelay(t, pool, sink, config())
		stop := start(t, r)
		// The batch is published, its COMMIT stalls: the connection dies there.
		waitSQL(t, pool, 20*time.Second, 1, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`)
		crashedBatch = sink.Count()
		waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep') k`)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if crashedBatch == 0 {
			t.Fatal("nothing was published before the COMMIT")
		}
		if r.Stats().Errors == 0 {
			t.Fatalf("the relay saw no failed batch: stats %+v", r.Stats())
		}
	} else {
		var fired atomic.Int32
		disarm := failpoint.Arm(point, func() error {
			if fired.Add(1) == 1 {
				return failpoint.ErrCrash
			}
			return nil
		})
		first := newRelay(t, pool, sink, config())
		err := first.Run(context.Background())
		disarm()
		if !errors.Is(err, failpoint.ErrCrash) {
			t.Fatalf("first relay: Run = %v, want the simulated crash", err)
		}
		if fired.Load() != 1 {
			t.Fatalf("failpoint %s fired %d times, want 1", point, fired.Load())
		}
		crashedBatch = sink.Count()
	}

	cfg := config()
	start(t, newRelay(t, pool, sink, cfg))
	if cfg.Retention.Mode == relay.DeleteOnPublish {
		waitSQL(t, pool, 20*time.Second, 0, `SELECT count(*) FROM outbox.events`)
	} else {
		waitSQL(t, pool, 20*time.Second, 10, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`)
	}
	msgs := sink.Messages()
	perID := map[string]int{}
	for _, m := range msgs {
		perID[m.ID.String()]++
	}
	if len(perID) != 10 {
		t.Fatalf("%d distinct events delivered, want 10", len(perID))
	}
	if extra == 0 && crashedBatch != 0 {
		t.Fatalf("window 1 published %d messages before the crash", crashedBatch)
	}
	if extra == 1 && crashedBatch == 0 {
		t.Fatal("nothing was published before the crash")
	}
	// Events of the crashed batch were delivered 1 + extra times, the rest once.
	crashed := map[string]bool{}
	for _, m := range msgs[:crashedBatch] {
		crashed[m.ID.String()] = true
	}
	for id, n := range perID {
		want := 1
		if crashed[id] {
			want += extra
		}
		if n != want {
			t.Fatalf("event %s delivered %d times, want %d", id, n, want)
		}
	}
	if cfg.Mode == relay.Ordered {
		checkOrder(t, msgs)
	}
}

// A discard racing a relay that is marking the same event: the discard waits for the
// relay's claim, then finds the event published and leaves it alone.
func TestDiscardRacesInFlightMark(t *testing.T) {
	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"d1"}, 1)
	var id string
	if err := pool.QueryRow(context.Background(), `SELECT id::text FROM outbox.events`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	atMark := make(chan struct{})
	release := make(chan struct{})
	var once atomic.Bool
	disarm := failpoint.Arm(failpoint.BeforeMark, func() error {
		if once.CompareAndSwap(false, true) {
			close(atMark)
			<-release
		}
		return nil
	})
	defer disarm()
	sink := &memsink.Sink{}
	start(t, newRelay(t, pool, sink, fastConfig()))
	<-atMark

	discarded := make(chan []string, 1)
	go func() {
		ids, err := relay.Discard(context.Background(), pool, relay.Action{IDs: parseIDs(t, id), Actor: "test", Reason: "race"})
		if err != nil {
			t.Error(err)
		}
		var s []string
		for _, i := range ids {
			s = append(s, i.String())
		}
		discarded <- s
	}()
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
	close(release)
	if got := <-discarded; len(got) != 0 {
		t.Fatalf("discard changed %v, an event published meanwhile", got)
	}
	var published, dead, discardedAt bool
	err := pool.QueryRow(context.Background(),
		`SELECT published_at IS NOT NULL, dead_at IS NOT NULL, discarded_at IS NOT NULL FROM outbox.events`).Scan(&published, &dead, &discardedAt)
	if err != nil {
		t.Fatal(err)
	}
	if !published || dead || discardedAt {
		t.Fatalf("state published=%v dead=%v discarded=%v, want published only", published, dead, discardedAt)
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays`); n != 0 {
		t.Fatalf("%d audit rows for a discard that changed nothing", n)
	}
}
