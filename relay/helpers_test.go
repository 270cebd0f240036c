package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	pgtest.Main(m)
}

// testSink records deliveries; fail (optional) decides a message's result before it
// is recorded. It honours the Sink contract: after a failure, later messages of the
// same aggregate in the call are not sent.
type testSink struct {
	mu        sync.Mutex
	delivered []outbox.Message
	calls     int
	fail      func(m outbox.Message) error
	onPublish func(msgs []outbox.Message) // runs after recording, before returning
	changed   chan struct{}
}

func newTestSink() *testSink { return &testSink{changed: make(chan struct{}, 1)} }

func (s *testSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	s.mu.Lock()
	s.calls++
	results := make([]error, len(msgs))
	failed := map[string]bool{}
	for i, m := range msgs {
		key := m.AggregateType + "/" + m.AggregateID
		switch {
		case ctx.Err() != nil:
			results[i] = ctx.Err()
			continue
		case failed[key]:
			results[i] = outbox.ErrNotSent
			continue
		}
		if s.fail != nil {
			if err := s.fail(m); err != nil {
				results[i] = err
				failed[key] = true
				continue
			}
		}
		s.delivered = append(s.delivered, m)
	}
	hook := s.onPublish
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	if hook != nil {
		hook(msgs)
	}
	return results
}

func (s *testSink) messages() []outbox.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outbox.Message(nil), s.delivered...)
}

// waitFor waits until cond holds on the deliveries, failing t after timeout.
func (s *testSink) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]outbox.Message) bool) []outbox.Message {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if msgs := s.messages(); cond(msgs) {
			return msgs
		}
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s (%d delivered)", timeout, what, len(s.messages()))
		case <-s.changed:
		case <-tick.C:
		}
	}
}

func distinctIDs(msgs []outbox.Message) int {
	seen := map[string]bool{}
	for _, m := range msgs {
		seen[m.ID.String()] = true
	}
	return len(seen)
}

// enqueue writes n events per aggregate for the given aggregates, interleaved, in
// transactions of up to 100 events, and returns them in write order.
func enqueue(t testing.TB, pool *pgxpool.Pool, aggregates []string, perAggregate int) {
	t.Helper()
	ctx := context.Background()
	var events []outbox.Event
	for v := 1; v <= perAggregate; v++ {
		for _, a := range aggregates {
			events = append(events, outbox.Event{
				AggregateType: "order", AggregateID: a, AggregateVersion: int64(v), EventType: "order.changed",
				Payload: []byte(fmt.Sprintf(`{"v":%d}`, v)),
			})
		}
	}
	for len(events) > 0 {
		n := min(100, len(events))
		chunk := events[:n]
		events = events[n:]
		if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), chunk...) }); err != nil {
			t.Fatal(err)
		}
	}
}

func aggregates(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// fastConfig is a relay config for tests: short waits.
func fastConfig() *relay.Config {
	return &relay.Config{
		PollInterval:         20 * time.Millisecond,
		FallbackPollInterval: 20 * time.Millisecond,
		RetryBaseDelay:       20 * time.Millisecond,
		RetryMaxDelay:        200 * time.Millisecond,
		BreakerInitialDelay:  100 * time.Millisecond,
		BreakerMaxDelay:      400 * time.Millisecond,
		ShutdownTimeout:      5 * time.Second,
		LeaseTTL:             time.Second,
		Logger:               slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// start runs r until the test ends; the returned func stops it and returns Run's error.
func start(t *testing.T, r *relay.Relay) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("relay did not stop within 30s")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newRelay(t *testing.T, pool *pgxpool.Pool, sink outbox.Sink, cfg *relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(pool, sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func queryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// checkOrder fails t unless, per aggregate, the first deliveries are in version order
// with no gap, and returns the number of distinct events delivered.
func checkOrder(t *testing.T, msgs []outbox.Message) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, m := range msgs {
		if seen[m.ID.String()] {
			continue // a duplicate; only first deliveries must be ordered
		}
		seen[m.ID.String()] = true
		if m.AggregateVersion != last[m.AggregateID]+1 {
			t.Fatalf("aggregate %s: first delivery of version %d after version %d", m.AggregateID, m.AggregateVersion, last[m.AggregateID])
		}
		last[m.AggregateID] = m.AggregateVersion
	}
}

// waitSQL waits until the integer query returns want.
func waitSQL(t *testing.T, pool *pgxpool.Pool, timeout time.Duration, want int, sql string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := -1
	for time.Now().Before(deadline) {
		if got = queryInt(t, pool, sql, args...); got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after %s: %s = %d, want %d", timeout, sql, got, want)
}

func parseIDs(t testing.TB, ids ...string) []uuid.UUID {
	t.Helper()
	out := make([]uuid.UUID, len(ids))
	for i, s := range ids {
		out[i] = uuid.MustParse(s)
	}
	return out
}

type uuidT = uuid.UUID

type atomicBool struct{ v atomic.Bool }

func (b *atomicBool) set(v bool) { b.v.Store(v) }
func (b *atomicBool) get() bool  { return b.v.Load() }
