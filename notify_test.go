package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// fakeExec records the statements a Notifier sends; block (if set) holds every Exec
// until it is closed, err is what Exec returns.
type fakeExec struct {
	mu     sync.Mutex
	calls  []fakeCall
	block  chan struct{}
	err    error
	called chan struct{} // signalled (without blocking) on every call
}

type fakeCall struct {
	at   time.Time
	sql  string
	args []any
}

func newFakeExec() *fakeExec { return &fakeExec{called: make(chan struct{}, 1)} }

func (f *fakeExec) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{time.Now(), sql, args})
	block, err := f.block, f.err
	f.mu.Unlock()
	select {
	case f.called <- struct{}{}:
	default:
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return pgconn.CommandTag{}, ctx.Err()
		}
	}
	return pgconn.CommandTag{}, err
}

func (f *fakeExec) snapshot() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

// waitCalls waits until at least n statements were sent.
func (f *fakeExec) waitCalls(t *testing.T, n int) []fakeCall {
	t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		if calls := f.snapshot(); len(calls) >= n {
			return calls
		}
		select {
		case <-f.called:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d notifies (%d sent)", n, len(f.snapshot()))
		}
	}
}

func newTestNotifier(t *testing.T, db outbox.Execer, cfg *outbox.NotifierConfig) *outbox.Notifier {
	t.Helper()
	n, err := outbox.NewNotifier(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// AfterCommit never waits for the database, and requests made while a notify is in
// flight collapse into one: 1000 commits during a stuck notify cost two notifies in
// all — the stuck one and one flushed by Close.
func TestNotifierNeverBlocksAndCoalesces(t *testing.T) {
	t.Parallel()
	db := newFakeExec()
	db.block = make(chan struct{})
	n := newTestNotifier(t, db, &outbox.NotifierConfig{Schema: "shop_outbox", MinInterval: time.Hour})

	ctx := context.Background()
	n.AfterCommit(ctx)
	db.waitCalls(t, 1) // the first request is sent at once, and hangs
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 20 {
				n.AfterCommit(ctx)
			}
		})
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterCommit blocked while a notify hung")
	}
	if got := len(db.snapshot()); got != 1 {
		t.Fatalf("%d notifies while the first hung; want 1", got)
	}

	close(db.block)
	n.Close() // flushes the pending request without waiting out the hour
	calls := db.snapshot()
	if len(calls) != 2 {
		t.Fatalf("%d notifies for 1001 commits; want 2 (one at once, one pending at Close)", len(calls))
	}
	for _, c := range calls {
		if !strings.Contains(c.sql, "pg_notify($1, $2)") || len(c.args) != 2 || c.args[0] != "outbox_wakeup_shop_outbox" || c.args[1] != "" {
			t.Fatalf("notify = %q %v; want pg_notify on outbox_wakeup_shop_outbox with payload ''", c.sql, c.args)
		}
	}
	if st := n.Stats(); st != (outbox.NotifierStats{Requests: 1001, Sent: 2}) {
		t.Fatalf("Stats() = %+v, want 1001 requests, 2 sent", st)
	}
	n.AfterCommit(ctx) // after Close: a no-op, never blocks
	n.Close()          // idempotent
	if got := len(db.snapshot()); got != 2 {
		t.Fatalf("%d notifies after Close; want still 2", got)
	}
}

// Under a steady stream of commits, notifies are MinInterval apart at least, and the
// first goes out at once.
func TestNotifierRateLimited(t *testing.T) {
	t.Parallel()
	db := newFakeExec()
	const minInterval = 20 * time.Millisecond
	n := newTestNotifier(t, db, &outbox.NotifierConfig{MinInterval: minInterval})
	ctx := context.Background()

	begin := time.Now()
	n.AfterCommit(ctx)
	first := db.waitCalls(t, 1)[0]
	if d := first.at.Sub(begin); d > time.Second {
		t.Fatalf("first notify after %s; want at once", d)
	}
	for time.Since(begin) < 300*time.Millisecond { // a stream of commits for 300ms
		n.AfterCommit(ctx)
	}
	calls := db.snapshot()
	elapsed := time.Since(begin)
	n.Close() // may flush one more, without waiting out the window
	if limit := int(elapsed/minInterval) + 1; len(calls) > limit || len(calls) < 2 {
		t.Fatalf("%d notifies in %s with MinInterval %s; want between 2 and %d", len(calls), elapsed, minInterval, limit)
	}
	// The window opens just before each send; the fake stamps a call a little later,
	// by a delay that varies between calls, so two stamps can be a little closer than
	// MinInterval. Without the limit they are microseconds apart.
	const jitter = minInterval / 4
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap < minInterval-jitter {
			t.Fatalf("notifies %d and %d only %s apart; MinInterval is %s", i-1, i, gap, minInterval)
		}
	}
	if extra := len(db.snapshot()) - len(calls); extra > 1 {
		t.Fatalf("Close sent %d notifies; want at most the one pending", extra)
	}
}

// The coalescing window opens when a send starts: a request made during a send that
// outlasts the window goes out as soon as that send returns, not a whole window later.
func TestNotifierWindowOpensWhenTheSendStarts(t *testing.T) {
	t.Parallel()
	db := newFakeExec()
	db.block = make(chan struct{})
	const minInterval = 300 * time.Millisecond
	n := newTestNotifier(t, db, &outbox.NotifierConfig{MinInterval: minInterval})
	ctx := context.Background()

	n.AfterCommit(ctx)
	first := db.waitCalls(t, 1)[0]
	n.AfterCommit(ctx) // during the send: pending
	time.Sleep(time.Until(first.at.Add(minInterval + 100*time.Millisecond)))
	released := time.Now()
	close(db.block) // the send returns after the window has passed
	second := db.waitCalls(t, 2)[1]
	if wait := second.at.Sub(released); wait >= minInterval {
		t.Fatalf("second notify %s after the first returned; want at once (the window of %s opened when the first started)", wait, minInterval)
	}
	if gap := second.at.Sub(first.at); gap < minInterval {
		t.Fatalf("notifies only %s apart; MinInterval is %s", gap, minInterval)
	}
}

// logRecorder is a slog handler keeping messages by level.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}

func (h *logRecorder) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

// A failing notify is logged once per run of failures, and its recovery once.
func TestNotifierLogsFailuresOnce(t *testing.T) {
	t.Parallel()
	db := newFakeExec()
	db.err = errors.New("connection refused")
	logs := &logRecorder{}
	n := newTestNotifier(t, db, &outbox.NotifierConfig{MinInterval: time.Millisecond, Logger: slog.New(logs)})
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		n.AfterCommit(ctx)
		db.waitCalls(t, i)
	}
	db.mu.Lock()
	db.err = nil
	db.mu.Unlock()
	n.AfterCommit(ctx)
	db.waitCalls(t, 4)
	n.Close() // the log line of the 4th notify is written before Close returns
	got := logs.all()
	if len(got) != 2 || !strings.HasPrefix(got[0], "WARN ") || !strings.HasPrefix(got[1], "INFO ") {
		t.Fatalf("logs = %q; want one warning for three failures, then one note on recovery", got)
	}
	if st := n.Stats(); st != (outbox.NotifierStats{Requests: 4, Sent: 1, Failed: 3}) {
		t.Fatalf("Stats() = %+v, want 4 requests, 1 sent, 3 failed", st)
	}
}

func TestNotifierConfigRefused(t *testing.T) {
	t.Parallel()
	db := newFakeExec()
	for _, tc := range []struct {
		db   outbox.Execer
		cfg  *outbox.NotifierConfig
		want string
	}{
		{nil, nil, "db is nil"},
		{db, &outbox.NotifierConfig{Schema: "Bad-Schema"}, "NotifierConfig.Schema"},
		{db, &outbox.NotifierConfig{Schema: "pg_catalog"}, "NotifierConfig.Schema"},
		{db, &outbox.NotifierConfig{MinInterval: -time.Second}, "NotifierConfig.MinInterval"},
	} {
		n, err := outbox.NewNotifier(tc.db, tc.cfg)
		if err == nil {
			n.Close()
			t.Errorf("NewNotifier(%+v) accepted", tc.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewNotifier(%+v) = %v; want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if len(db.snapshot()) != 0 {
		t.Fatal("a refused Notifier sent a statement")
	}
}

// The channel is "outbox_wakeup_" + schema, cut to the 63 bytes PostgreSQL accepts, and
// a LISTEN on it (quoted) hears a pg_notify on it even for the longest schema name.
func TestNotifierWakeupChannel(t *testing.T) {
	t.Parallel()
	if got := outbox.WakeupChannel("outbox"); got != "outbox_wakeup_outbox" {
		t.Fatalf("WakeupChannel(outbox) = %q", got)
	}
	long := strings.Repeat("s", 63)
	ch := outbox.WakeupChannel(long)
	if len(ch) != 63 || !strings.HasPrefix(ch, "outbox_wakeup_sss") {
		t.Fatalf("WakeupChannel(63 bytes) = %q (%d bytes)", ch, len(ch))
	}

	pool := pgtest.Pool(t)
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	mustExec(t, conn, "LISTEN "+pgx.Identifier{outbox.WakeupChannel(long)}.Sanitize())
	n := newTestNotifier(t, pool, &outbox.NotifierConfig{Schema: long})
	n.AfterCommit(ctx)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := conn.WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no wake-up on %q: %v", ch, err)
	}
	if got.Channel != ch {
		t.Fatalf("notified %q, want %q", got.Channel, ch)
	}
}

// notification is one received by the test's LISTEN session, in queue (commit) order.
type notification struct{ channel, payload string }

// 500 concurrent business transactions, each asking for a wake-up after commit, cost
// far fewer notifies than commits — at most one per MinInterval — and at least one
// notify commits after the last business commit, so no commit is left unannounced.
//
// Order is read off the notification queue, which delivers in commit order: each
// business transaction also sends a marker NOTIFY inside itself (test only), so "a
// wake-up after the last marker" means "a wake-up committed after the last commit".
func TestNotifierCoalescesConcurrentCommits(t *testing.T) {
	t.Parallel()
	const commits = 500
	pool := pgtest.Pool(t)
	ctx := context.Background()
	wakeup := outbox.WakeupChannel("outbox")

	lconn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, lconn, "LISTEN "+pgx.Identifier{wakeup}.Sanitize()+"; LISTEN test_marker")
	received := make(chan notification, 4*commits)
	lctx, lcancel := context.WithCancel(ctx)
	listening := make(chan struct{})
	defer func() { // the reader first, then its connection
		lcancel()
		<-listening
		_ = lconn.Close(ctx)
	}()
	go func() {
		defer close(listening)
		for {
			n, err := lconn.WaitForNotification(lctx)
			if err != nil {
				return
			}
			received <- notification{n.Channel, n.Payload}
		}
	}()

	n := newTestNotifier(t, pool, nil)
	begin := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, commits)
	for i := range commits {
		wg.Go(func() {
			errs <- outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
				if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), event(fmt.Sprintf("o-%d", i))); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "SELECT pg_notify('test_marker', $1)", strconv.Itoa(i))
				return err
			}, n.AfterCommit)
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	// Read until a wake-up follows the last of the markers.
	var (
		markers, wakeups int
		wokenAfterLast   bool
	)
	deadline := time.After(10 * time.Second)
	for !wokenAfterLast {
		select {
		case got := <-received:
			switch got.channel {
			case "test_marker":
				markers++
			case wakeup:
				wakeups++
				wokenAfterLast = markers == commits
			}
		case <-deadline:
			t.Fatalf("no wake-up after the last commit: %d/%d markers, %d wake-ups", markers, commits, wakeups)
		}
	}
	// Count the rest: Close sends what is pending; a final marker ends the stream.
	n.Close()
	mustExec(t, pool, "SELECT pg_notify('test_marker', 'end')")
	for done := false; !done; {
		select {
		case got := <-received:
			switch {
			case got.channel == wakeup:
				wakeups++
			case got.payload == "end":
				done = true
			}
		case <-deadline:
			t.Fatal("the end marker never arrived")
		}
	}
	total := time.Since(begin) // every notify was sent within it

	t.Logf("%d commits in %s: %d notifies", commits, elapsed, wakeups)
	if limit := int(total/outbox.DefaultNotifyMinInterval) + 2; wakeups > limit {
		t.Fatalf("%d notifies in %s: more than one per %s", wakeups, total, outbox.DefaultNotifyMinInterval)
	}
	if wakeups > commits/5 {
		t.Fatalf("%d notifies for %d commits: not coalesced", wakeups, commits)
	}
}

// A Notifier wakes relays after commit, from outside the transaction.
func ExampleNotifier() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, dsn)

	// (Listening only to show the wake-up; the relay does this.)
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		panic(err)
	}
	defer func() { _ = listener.Close(ctx) }()
	if _, err := listener.Exec(ctx, "LISTEN "+outbox.WakeupChannel("outbox")); err != nil {
		panic(err)
	}

	notifier, err := outbox.NewNotifier(pool, nil) // one per pool and schema
	if err != nil {
		panic(err)
	}
	defer notifier.Close()

	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
			AggregateType: "order", AggregateID: "o-1", EventType: "order.created", Payload: []byte(`{}`),
		})
	}, notifier.AfterCommit)
	fmt.Println("committed:", err == nil)

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := listener.WaitForNotification(wctx); err == nil {
		fmt.Println("relays woken on", n.Channel)
	}
	// Output:
	// committed: true
	// relays woken on outbox_wakeup_outbox
}
