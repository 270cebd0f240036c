package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Wake-up tests. Each starts the listener itself with relay.StartListener (to tune it),
// on a relay whose own listener is off (manualListener); listen_run_test.go checks the
// listener that Run starts. The relays use a long PollInterval where a test shows that
// a wake-up, not a poll, delivered an event.

// waitChan waits for ch to be closed or to deliver, failing t after timeout.
func waitChan[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// listening starts, for the rest of t, a wake-up listener for r tuned by opts (see
// relay.StartListener), and waits until its self-test has passed.
func listening(t *testing.T, r *relay.Relay, opts relay.ListenerOptions) *relay.TestListener {
	t.Helper()
	lst := relay.StartListener(t, r, opts)
	waitUntil(t, 10*time.Second, "self-test passed", func() bool { return lst.SelfTest() == "passed" })
	return lst
}

// newNotifier returns a Notifier on pool, closed when t ends.
func newNotifier(t *testing.T, pool *pgxpool.Pool) *outbox.Notifier {
	t.Helper()
	n, err := outbox.NewNotifier(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// enqueueOne commits one event of aggregate id and, with n, asks n for a wake-up after
// the commit, as an application does.
func enqueueOne(t *testing.T, pool *pgxpool.Pool, n *outbox.Notifier, id string) {
	t.Helper()
	ctx := context.Background()
	var after []outbox.AfterCommitFunc
	if n != nil {
		after = append(after, n.AfterCommit)
	}
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
			AggregateType: "order", AggregateID: id, EventType: "order.changed", Payload: []byte(`{}`),
		})
	}, after...)
	if err != nil {
		t.Fatal(err)
	}
}

// listenerPIDs returns the backends of the wake-up listeners on pool's database.
func listenerPIDs(t *testing.T, pool *pgxpool.Pool) []int32 {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, relay.ListenerAppName)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// terminateListeners kills every wake-up listener backend on pool's database.
func terminateListeners(t *testing.T, pool *pgxpool.Pool) []int32 {
	t.Helper()
	pids := listenerPIDs(t, pool)
	if len(pids) == 0 {
		t.Fatal("no listener backend in pg_stat_activity")
	}
	for _, pid := range pids {
		var ok bool
		if err := pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
		}
	}
	return pids
}

// slowPollConfig is fastConfig with a poll interval no test waits for: an event that
// arrives quickly was brought by a wake-up. Unordered: in ordered mode a lease
// acquisition wakes the workers too, which would blur what woke the relay.
func slowPollConfig() *relay.Config {
	cfg := manualListener(fastConfig())
	cfg.PollInterval = 10 * time.Second
	cfg.Mode = relay.Unordered
	return cfg
}

// wakeDeadline is how soon a woken relay must deliver: far below slowPollConfig's poll.
const wakeDeadline = 2 * time.Second

// Lost wake-ups, first part: the listener's backend is terminated; the listener
// reconnects, re-LISTENs, and a later Notifier wake-up still reaches the relay.
func TestWakeupListenerReconnectsAfterTerminate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, slowPollConfig())
	start(t, r)
	lst := listening(t, r, relay.ListenerOptions{})
	n := newNotifier(t, pool)

	enqueueOne(t, pool, n, "before-kill")
	waitFor(t, sink, wakeDeadline, "the event before the kill, woken by the notifier", delivered("before-kill"))

	old := terminateListeners(t, pool)
	waitUntil(t, 10*time.Second, "the listener to reconnect", func() bool { return lst.Connects() >= 2 })
	if now := listenerPIDs(t, pool); len(now) == 0 || now[0] == old[0] {
		t.Fatalf("listener backends after the kill: %v (before: %v)", now, old)
	}

	for i := range 3 {
		before := lst.Notifications()
		id := fmt.Sprintf("after-kill-%d", i)
		enqueueOne(t, pool, n, id)
		waitFor(t, sink, wakeDeadline, id+", woken through the new connection", delivered(id))
		// The relay may have found the event on its own (it looks again right after
		// a non-empty batch), but the wake-up must reach the reconnected listener.
		waitUntil(t, wakeDeadline, "the reconnected listener to receive "+id+"'s wake-up",
			func() bool { return lst.Notifications() > before })
	}
}

// Lost wake-ups, the lost wake-up: an event commits, and its notification is sent, while
// the listener is disconnected (between the relay's "nothing found" and the
// re-LISTEN). The listener wakes the relay once it is back, so the event does not wait
// for the poll.
func TestWakeupLostWhileDisconnectedIsRecovered(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, slowPollConfig())
	start(t, r)
	var (
		attempts atomic.Int32
		blocked  = make(chan struct{})
		release  = make(chan struct{})
	)
	listening(t, r, relay.ListenerOptions{BeforeConnect: func(ctx context.Context) {
		if attempts.Add(1) == 2 { // the reconnect after the kill: hold it
			close(blocked)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}})

	terminateListeners(t, pool)
	waitChan(t, blocked, 10*time.Second, "the listener to notice the kill")
	enqueueOne(t, pool, nil, "while-away")
	// The wake-up for it, sent now, reaches nobody.
	if _, err := pool.Exec(context.Background(), `SELECT pg_notify($1, '')`, outbox.WakeupChannel("outbox")); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, sink, wakeDeadline, "the event committed while the listener was away", delivered("while-away"))
}

// Lost wake-ups, notifications dropped entirely (nobody notifies: no Notifier, no
// trigger): the fallback poll still delivers every event within one PollInterval.
func TestWakeupDroppedFallbackPollDelivers(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := manualListener(fastConfig())
	cfg.PollInterval = 500 * time.Millisecond
	cfg.Mode = relay.Unordered // no lease rounds to delay a claim
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	lst := listening(t, r, relay.ListenerOptions{})

	// One poll interval, plus a margin for the claim under -race on a busy machine.
	const slack = 700 * time.Millisecond
	for i := range 3 {
		id := fmt.Sprintf("unannounced-%d", i)
		enqueueOne(t, pool, nil, id)
		waitFor(t, sink, cfg.PollInterval+slack, id+" by polling", delivered(id))
	}
	if got := lst.Notifications(); got != 0 {
		t.Fatalf("listener received %d notifications; nothing should have notified", got)
	}
}

// recorder is a slog handler keeping the records it is given.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *recorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recorder) WithGroup(string) slog.Handler            { return h }
func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}

func (h *recorder) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level >= slog.LevelWarn {
			out = append(out, r.Message)
		}
	}
	return out
}

// A LISTEN that never fires (a transaction-pooling PgBouncer, simulated
// by a self-test notification that vanishes). The self-test fails, the listener logs a
// warning, closes its connection and stops; the relay delivers everything by polling.
func TestWakeupSelfTestFailureFallsBackToPolling(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, manualListener(fastConfig()))
	start(t, r)
	logs := &recorder{}
	lst := relay.StartListener(t, r, relay.ListenerOptions{
		DropSelfTest: true, SelfTestTimeout: 300 * time.Millisecond, Logger: slog.New(logs),
	})
	waitChan(t, lst.Done(), 10*time.Second, "the listener to give up")
	if got := lst.SelfTest(); got != "failed" {
		t.Fatalf("self-test = %s, want failed", got)
	}
	warned := false
	for _, msg := range logs.warnings() {
		warned = warned || strings.Contains(msg, "self-test")
	}
	if !warned {
		t.Fatalf("no self-test warning logged; warnings: %q", logs.warnings())
	}
	waitUntil(t, 10*time.Second, "the listener's backend to go", func() bool { return len(listenerPIDs(t, pool)) == 0 })

	enqueue(t, pool, aggregates("pgb", 10), 5)
	waitFor(t, sink, 20*time.Second, "50 events by polling", distinct(50))
	waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
}

// The listener sends nothing to the server while idle: the relay's idle cost is its
// poll alone.
func TestWakeupListenerIsSilentWhileIdle(t *testing.T) {
	t.Parallel()
	pool, queries := countedPool(t, pgtest.ConnString(t, nil))
	r := newRelay(t, pool, &memsink.Sink{}, slowPollConfig()) // not started: only the listener runs
	lst := listening(t, r, relay.ListenerOptions{})
	before := queries.n.Load()
	idle := time.NewTimer(1500 * time.Millisecond) // proving an absence takes a wait
	<-idle.C
	if sent := queries.n.Load() - before; sent != 0 {
		t.Fatalf("idle listener sent %d statements in 1.5s", sent)
	}
	if lst.Connects() != 1 {
		t.Fatalf("connects = %d, want 1", lst.Connects())
	}
}

// The opt-in trigger: once installed, a plain write (no Notifier) wakes a relay whose
// poll is 10s away; uninstalled, it is gone and wakes nothing. Installing is
// idempotent and safe from many processes at once.
func TestNotifyTriggerOptIn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	triggers := `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'outbox.events'::regclass AND tgname = 'events_notify_wakeup'`
	functions := `SELECT count(*) FROM pg_proc WHERE proname = 'events_notify_wakeup' AND pronamespace = 'outbox'::regnamespace`

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- relay.InstallNotifyTrigger(ctx, pool, "outbox") })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent install: %v", err)
		}
	}
	if n := queryInt(t, pool, triggers); n != 1 {
		t.Fatalf("%d triggers after install, want 1", n)
	}

	sink := &memsink.Sink{}
	r := newRelay(t, pool, sink, slowPollConfig())
	start(t, r)
	lst := listening(t, r, relay.ListenerOptions{})
	for i := range 2 {
		id := fmt.Sprintf("triggered-%d", i)
		before := lst.Notifications()
		enqueueOne(t, pool, nil, id)
		waitFor(t, sink, wakeDeadline, id+", woken by the trigger", delivered(id))
		waitUntil(t, wakeDeadline, id+"'s notification", func() bool { return lst.Notifications() > before })
	}

	for range 2 { // idempotent
		if err := relay.UninstallNotifyTrigger(ctx, pool, "outbox"); err != nil {
			t.Fatal(err)
		}
	}
	if n, f := queryInt(t, pool, triggers), queryInt(t, pool, functions); n != 0 || f != 0 {
		t.Fatalf("after uninstall: %d triggers, %d functions; want none", n, f)
	}
	// Negative control: without the trigger the same write notifies nobody. (Judged by
	// the listener: the relay may still be looking again after its last batch.)
	notified := lst.Notifications()
	enqueueOne(t, pool, nil, "untriggered")
	quiet := time.NewTimer(time.Second) // proving an absence takes a wait
	<-quiet.C
	if got := lst.Notifications(); got != notified {
		t.Fatalf("the listener got %d notifications after the trigger was removed", got-notified)
	}
}

func TestNotifyTriggerRefusesBadSchema(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{"Outbox", `x"; DROP TABLE y; --`, "pg_x"} {
		if err := relay.InstallNotifyTrigger(context.Background(), execNever{t}, schema); err == nil {
			t.Errorf("schema %q accepted", schema)
		}
	}
}

// execNever fails the test when a statement is sent.
type execNever struct{ t *testing.T }

func (e execNever) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	e.t.Errorf("statement sent: %s", sql)
	return pgconn.CommandTag{}, nil
}
