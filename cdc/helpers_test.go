package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// testLogger logs warnings and errors to stderr.
var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// newRelay returns a relay in mode that polls only every hour and never hands a slow
// Publish call to a late settle (whose end wakes the polling claims), so what a test
// sees published went by change data capture unless it wakes the relay; and starts it.
func newRelay(t *testing.T, pool *pgxpool.Pool, sink outbox.Sink, mode relay.Mode) *relay.Relay {
	t.Helper()
	return runRelay(t, pool, sink, &relay.Config{
		Mode: mode, Wakeup: relay.WakeupPoll, PollInterval: time.Hour, LeaseTTL: 30 * time.Second,
		SlowPublish: time.Minute, ShutdownTimeout: 5 * time.Second, Logger: testLogger,
	})
}

// runRelay starts a relay with cfg until the test ends and, in ordered mode, waits
// until it leases every partition.
func runRelay(t *testing.T, pool *pgxpool.Pool, sink outbox.Sink, cfg *relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(pool, sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, "relay", r.Run)
	if cfg.Mode != relay.Unordered {
		waitUntil(t, 10*time.Second, "the relay leases every partition", func() bool {
			return queryInt(t, pool, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner()) == 16
		})
	}
	return r
}

// waitPollingIdle waits until r's polling claims have run (at its start, and the wake-up
// of a Source's session) and stopped: no new claim for 300ms, on a relay that polls once
// an hour. A loaded machine can run them late, after a test has written what it means
// the Source alone to take.
func waitPollingIdle(t *testing.T, r *relay.Relay) {
	t.Helper()
	last, since := r.Stats().Claims, time.Now()
	waitUntil(t, 20*time.Second, "the relay's polling claims go idle", func() bool {
		if n := r.Stats().Claims; n != last {
			last, since = n, time.Now()
		}
		return last > 0 && time.Since(since) > 300*time.Millisecond
	})
}

// startStreamingSource starts an ordered relay and a Source on a database of the test's
// own whose logical_decoding_work_mem is at its 64 kB minimum, so that large transactions
// are streamed before their commit.
func startStreamingSource(t *testing.T) (*pgxpool.Pool, *memsink.Sink, *Source) {
	t.Helper()
	pool := pgtest.Pool(t)
	var db string
	if err := pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET logical_decoding_work_mem = '64kB'"); err != nil {
		t.Fatal(err)
	}
	sink, s := startCDC(t, pool, relay.Ordered)
	return pool, sink, s
}

// startCDC starts a relay in mode with an in-memory sink and a streaming Source beside it
// on a slot of the test's own.
func startCDC(t *testing.T, pool *pgxpool.Pool, mode relay.Mode) (*memsink.Sink, *Source) {
	t.Helper()
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, mode)
	s := newSource(t, pool, r, slotName(t, pool))
	startSource(t, pool, s)
	return sink, s
}

// checkStreamed fails t unless the slot streamed a transaction before its commit.
func checkStreamed(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	if streamed := queryInt(t, pool, `SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = $1`, slot); streamed == 0 {
		t.Fatal("no transaction was streamed: the test did not test streaming")
	}
}

// waitConfirmedPastNow waits until slot has confirmed the server's WAL position of now.
func waitConfirmedPastNow(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	var end string
	if err := pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the slot confirms past the last event", func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn >= $2::pg_lsn`, slot, end) == 1
	})
}

// slotName is a slot of the test's own (slots are the cluster's, tests share it).
func slotName(t *testing.T, pool *pgxpool.Pool) string {
	var db string
	if err := pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	return "s_" + strings.ReplaceAll(db, "outbox_test_", "")
}

// newSource returns a Source for r with a slot of the test's own, dropped when the test
// ends (after the Source stops).
func newSource(t *testing.T, pool *pgxpool.Pool, r *relay.Relay, slot string) *Source {
	t.Helper()
	s, err := New(pool, r, &Config{Slot: slot, StatusInterval: 100 * time.Millisecond, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dropSlotAtEnd drops the slot when the test ends (registered before the Source
// starts, it runs after the Source stopped). A slot still active — the walsender of a
// killed process has not noticed yet — has its walsender ended first: a slot left behind
// keeps the test's database from being dropped.
func dropSlotAtEnd(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for deadline := time.Now().Add(10 * time.Second); ; {
			_, _ = pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
			_, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("drop slot %s: %v", slot, err)
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// startSource starts the Source (with its slot dropped at the end) and waits until it
// streams (while its slot is being created, it exists and is active already, but what
// commits then is not in its stream).
func startSource(t *testing.T, pool *pgxpool.Pool, s *Source) (stop func() error) {
	t.Helper()
	dropSlotAtEnd(t, pool, s.cfg.Slot)
	stop = run(t, "source", s.Run)
	waitUntil(t, 20*time.Second, "the source streams", func() bool { return s.Stats().Streaming })
	// a new slot wakes the relay's polling claims for what committed before it: let
	// them find the table empty before the test writes
	time.Sleep(200 * time.Millisecond)
	return stop
}

// run runs fn until the test ends; stop ends it earlier and returns its error.
func run(t *testing.T, what string, fn func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New(what + " did not stop within 30s")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
	return stop
}

// write enqueues perAggregate events for each aggregate of ids in one transaction, with
// versions from first.
func write(t *testing.T, pool *pgxpool.Pool, ids []string, first, perAggregate int) {
	t.Helper()
	var events []outbox.Event
	for v := first; v < first+perAggregate; v++ {
		for _, id := range ids {
			events = append(events, outbox.Event{
				AggregateType: "order", AggregateID: id, AggregateVersion: int64(v), EventType: "order.changed",
				Payload: []byte(fmt.Sprintf(`{"v":%d}`, v)),
			})
		}
	}
	ctx := context.Background()
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		// a commit that waits for its WAL flush, as by default: the WAL can announce it
		// before the session is seen as done (the Source waits for that)
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...)
	}); err != nil {
		t.Fatal(err)
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func queryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDelivered waits until sink holds n distinct events and returns its deliveries.
func waitDelivered(t *testing.T, sink *memsink.Sink, n int, timeout time.Duration) []outbox.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msgs, err := sink.WaitUntil(ctx, func(msgs []outbox.Message) bool { return distinct(msgs) >= n })
	if err != nil {
		t.Fatalf("timed out after %s: %d of %d events delivered", timeout, distinct(msgs), n)
	}
	return msgs
}

func distinct(msgs []outbox.Message) int {
	seen := map[[16]byte]bool{}
	for _, m := range msgs {
		seen[m.ID] = true
	}
	return len(seen)
}

// checkOrder fails t unless each aggregate's first deliveries come in version order,
// without a gap.
func checkOrder(t *testing.T, msgs []outbox.Message) {
	t.Helper()
	seen := map[[16]byte]bool{}
	last := map[string]int64{}
	for _, m := range msgs {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		if m.AggregateVersion != last[m.AggregateID]+1 {
			t.Fatalf("aggregate %s: version %d delivered after %d", m.AggregateID, m.AggregateVersion, last[m.AggregateID])
		}
		last[m.AggregateID] = m.AggregateVersion
	}
}
