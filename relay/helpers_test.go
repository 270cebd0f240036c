package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
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
	"github.com/outboxkit/outbox/sink/memsink"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	pgtest.Main(m)
}

// aggregateKey names an aggregate: its type and id. (The relay's own is unexported.)
type aggregateKey struct{ typ, id string }

func keyOf(m outbox.Message) aggregateKey { return aggregateKey{m.AggregateType, m.AggregateID} }

func (k aggregateKey) String() string { return k.typ + "/" + k.id }

// waitFor waits until cond holds on sink's deliveries, and returns them; it fails t
// after timeout.
func waitFor(t *testing.T, sink *memsink.Sink, timeout time.Duration, what string, cond func([]outbox.Message) bool) []outbox.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	msgs, err := sink.WaitUntil(ctx, cond)
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s (%d delivered)", timeout, what, len(msgs))
	}
	return msgs
}

// distinct is a condition for waitFor: n distinct events delivered.
func distinct(n int) func([]outbox.Message) bool {
	return func(msgs []outbox.Message) bool { return distinctIDs(msgs) == n }
}

// delivered is a condition for waitFor: an event of aggregate id delivered.
func delivered(id string) func([]outbox.Message) bool {
	return func(msgs []outbox.Message) bool {
		return slices.ContainsFunc(msgs, func(m outbox.Message) bool { return m.AggregateID == id })
	}
}

// count returns how many of msgs match.
func count(msgs []outbox.Message, match func(outbox.Message) bool) int {
	n := 0
	for _, m := range msgs {
		if match(m) {
			n++
		}
	}
	return n
}

// counted is a condition for waitFor: n deliveries match.
func counted(n int, match func(outbox.Message) bool) func([]outbox.Message) bool {
	return func(msgs []outbox.Message) bool { return count(msgs, match) == n }
}

// slowSink takes delay per call (a broker's latency; memsink's is per message), then
// publishes through inner (when ctx ended first, inner fails the messages), and counts
// what it published. With started set, it signals there, without blocking, when a call
// starts.
type slowSink struct {
	inner     outbox.Sink
	delay     time.Duration
	started   chan struct{}
	published atomic.Int64
}

func (s *slowSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	select {
	case s.started <- struct{}{}:
	default:
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
	errs := s.inner.Publish(ctx, msgs)
	for _, err := range errs {
		if err == nil {
			s.published.Add(1)
		}
	}
	return errs
}

// eventually polls cond until it holds or timeout has passed, and reports whether it
// held.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// waitUntil polls cond until it holds, failing t after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventually(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// throughout runs check every 20 ms for d, a span the test sets (proving an absence
// takes a wait); check fails the test itself.
func throughout(d time.Duration, check func()) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		check()
	}
}

func distinctIDs(msgs []outbox.Message) int {
	seen := map[uuid.UUID]bool{}
	for _, m := range msgs {
		seen[m.ID] = true
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

// inBothModes runs test as a parallel subtest per relay mode, ordered then unordered.
func inBothModes(t *testing.T, test func(t *testing.T, mode relay.Mode)) {
	t.Helper()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			test(t, mode)
		})
	}
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

// execSQL runs each statement on pool, failing t on an error.
func execSQL(t testing.TB, pool *pgxpool.Pool, statements ...string) {
	t.Helper()
	for _, q := range statements {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// floodAndQuiet are the statements that write n single-event aggregates of type flood,
// then one event of type quiet: a backlog of one type beside another type's trickle.
func floodAndQuiet(n int) []string {
	return []string{
		fmt.Sprintf(`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type)
			SELECT gen_random_uuid(), 'flood', 'f' || g, 'flood.x' FROM generate_series(1, %d) g`, n),
		`INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) VALUES (gen_random_uuid(), 'quiet', 'q', 'quiet.x')`,
	}
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
// with no gap.
func checkOrder(t *testing.T, msgs []outbox.Message) {
	t.Helper()
	seen := map[uuid.UUID]bool{}
	last := map[aggregateKey]int64{}
	for _, m := range msgs {
		if seen[m.ID] {
			continue // a duplicate; only first deliveries must be ordered
		}
		seen[m.ID] = true
		if k := keyOf(m); m.AggregateVersion != last[k]+1 {
			t.Fatalf("aggregate %s: first delivery of version %d after version %d", k, m.AggregateVersion, last[k])
		}
		last[keyOf(m)] = m.AggregateVersion
	}
}

// waitSQL waits until the integer query returns want.
func waitSQL(t *testing.T, pool *pgxpool.Pool, timeout time.Duration, want int, sql string, args ...any) {
	t.Helper()
	got := -1
	if !eventually(timeout, func() bool { got = queryInt(t, pool, sql, args...); return got == want }) {
		t.Fatalf("after %s: %s = %d, want %d", timeout, sql, got, want)
	}
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
