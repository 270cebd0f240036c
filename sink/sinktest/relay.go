package sinktest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/relay"
)

// RelayHarness is a relay publishing through the sink under test to its broker, on a
// database of the test's own, for the end-to-end scenarios [RelayDelivers],
// [RelayOutage] and [RelayRejects]. The scenarios count events in the schema "outbox"
// (the relay's default).
type RelayHarness struct {
	// Enqueue writes events in one transaction (outbox.Enqueue in the test's
	// database). Required.
	Enqueue func(ctx context.Context, events []outbox.Event) error
	// QueryRow runs a query returning one row on the test's database and scans it
	// into dest (pool.QueryRow(ctx, sql).Scan(dest...)). Required.
	QueryRow func(ctx context.Context, sql string, dest ...any) error
	// NewRelay returns a relay with cfg over the database and the sink
	// (relay.New(pool, sink, cfg)); the scenario runs it until the test ends. Required.
	NewRelay func(cfg *relay.Config) (*relay.Relay, error)
	// Read returns what an independent consumer (not the sink's code) reads from the
	// broker, each aggregate's messages in the order the broker holds them. Required.
	Read func(ctx context.Context) ([]outbox.Message, error)
	// SetDown takes the broker out of the sink's reach and brings it back, as
	// [Harness.SetDown]. Required by [RelayOutage] only.
	SetDown func(down bool)
}

// RelayConfig is a relay configuration for tests: short polls, backoffs and breaker
// delays, errors logged to stderr.
func RelayConfig() *relay.Config {
	return &relay.Config{
		PollInterval: 20 * time.Millisecond, FallbackPollInterval: 50 * time.Millisecond,
		RetryBaseDelay: 20 * time.Millisecond, RetryMaxDelay: 200 * time.Millisecond,
		BreakerInitialDelay: 100 * time.Millisecond, BreakerMaxDelay: 400 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, LeaseTTL: time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
}

// The queries of the scenarios.
const (
	publishedSQL = `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`
	touchedSQL   = `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND (attempts > 0 OR dead_at IS NOT NULL OR last_error IS NOT NULL)`
)

// relayWait bounds each wait of the scenarios.
const relayWait = time.Minute

// RelayDelivers writes 1,000 events over 50 aggregates, runs the relay until all are
// published, and checks with [CheckDelivered] that the independent reader finds every
// one exactly once, intact, in order per aggregate. It returns the events as messages,
// in write order, for checks with other readers.
func RelayDelivers(t *testing.T, h RelayHarness) []outbox.Message {
	t.Helper()
	want := h.write(t, "e2e", 50, 20, nil)
	h.Start(t, RelayConfig())
	h.WaitPublished(t, len(want))
	CheckDelivered(t, want, h.read(t), true)
	return want
}

// RelayOutage runs the relay until a first backlog is published, takes the broker
// down, writes more, and checks that while it is down the breaker opens, nothing is
// published and no event has an attempt counted or goes dead; then brings it back and
// checks that everything arrives, each event at least once, in order of first
// delivery per aggregate.
func RelayOutage(t *testing.T, h RelayHarness) {
	t.Helper()
	want := h.write(t, "before", 10, 10, nil)
	r := h.Start(t, RelayConfig())
	h.WaitPublished(t, len(want))

	h.SetDown(true)
	more := h.write(t, "during", 20, 10, nil)
	WaitFor(t, relayWait, "the relay's breaker to open", func() bool {
		if n := h.count(t, publishedSQL); n != len(want) {
			t.Fatalf("%d events published while the broker was out of reach, want %d", n, len(want))
		}
		return r.Stats().BreakerOpens > 0
	})
	// Down for 2 s more: the relay probes several times.
	time.Sleep(2 * time.Second) //nolint:forbidigo // the outage's length is the scenario's input
	if n := h.count(t, publishedSQL); n != len(want) {
		t.Fatalf("%d events published while the broker was out of reach, want %d", n, len(want))
	}
	if n := h.count(t, touchedSQL); n != 0 {
		t.Fatalf("%d events had an attempt counted or went dead while the broker was out of reach", n)
	}

	h.SetDown(false)
	want = append(want, more...)
	h.WaitPublished(t, len(want))
	CheckDelivered(t, want, h.read(t), false)
}

// RelayRejects writes 5 events for each of 10 aggregates, the second event of one of
// them changed by poison so that the broker refuses it, and checks that it goes dead
// after one attempt with a last_error holding each of reasons, that the later events
// of its aggregate are held, and that every other event is delivered once, in order.
func RelayRejects(t *testing.T, h RelayHarness, poison func(*outbox.Event), reasons ...string) {
	t.Helper()
	const poisoned = "rejected-3"
	want := h.write(t, "rejected", 10, 5, func(e *outbox.Event) {
		if e.AggregateID == poisoned && e.AggregateVersion == 2 {
			poison(e)
		}
	})
	h.Start(t, RelayConfig())
	h.WaitPublished(t, len(want)-4) // the poisoned aggregate's versions 2 to 5 are held
	WaitFor(t, relayWait, "the refused event to be dead", func() bool {
		return h.count(t, `SELECT count(*) FROM outbox.events WHERE dead_at IS NOT NULL`) == 1
	})
	var aggregateID, lastError string
	var version int64
	var attempts int
	if err := h.QueryRow(t.Context(), `SELECT aggregate_id, aggregate_version, attempts, last_error FROM outbox.events WHERE dead_at IS NOT NULL`,
		&aggregateID, &version, &attempts, &lastError); err != nil {
		t.Fatalf("read the dead event: %v", err)
	}
	if aggregateID != poisoned || version != 2 || attempts != 1 {
		t.Fatalf("dead: %s version %d after %d attempts, want %s version 2 after 1", aggregateID, version, attempts, poisoned)
	}
	for _, reason := range reasons {
		if !strings.Contains(lastError, reason) {
			t.Errorf("the dead event's last_error %q does not say %q", lastError, reason)
		}
	}
	var delivered []outbox.Message
	for _, m := range want {
		if m.AggregateID != poisoned || m.AggregateVersion < 2 {
			delivered = append(delivered, m)
		}
	}
	CheckDelivered(t, delivered, h.read(t), true)
}

// write enqueues perAggregate events for each of n aggregates, interleaved, in
// transactions of 100, and returns them as the messages a consumer should read.
func (h RelayHarness) write(t *testing.T, prefix string, n, perAggregate int, change func(*outbox.Event)) []outbox.Message {
	t.Helper()
	var events []outbox.Event
	var want []outbox.Message
	for v := 1; v <= perAggregate; v++ {
		for a := range n {
			e := outbox.Event{
				ID: outbox.NewID(), AggregateType: "order", AggregateID: fmt.Sprintf("%s-%d", prefix, a), AggregateVersion: int64(v),
				EventType: "order.changed", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON,
				Headers: map[string]string{"tenant": "acme", "x-version": fmt.Sprint(v)}, Payload: fmt.Appendf(nil, `{"v": %d}`, v),
				TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			}
			if change != nil {
				change(&e)
			}
			events = append(events, e)
			want = append(want, outbox.Message{
				ID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID, AggregateVersion: e.AggregateVersion,
				EventType: e.EventType, SchemaVersion: e.SchemaVersion, Headers: e.Headers, ContentType: e.ContentType,
				Payload: e.Payload, TraceParent: e.TraceParent,
			})
		}
	}
	for len(events) > 0 {
		chunk := events[:min(100, len(events))]
		events = events[len(chunk):]
		if err := h.Enqueue(t.Context(), chunk); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	return want
}

// Start runs a relay with cfg until t ends, for a scenario of a sink's own.
func (h RelayHarness) Start(t *testing.T, cfg *relay.Config) *relay.Relay {
	t.Helper()
	r, err := h.NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return r
}

func (h RelayHarness) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	if err := h.QueryRow(t.Context(), sql, &n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// WaitPublished waits until n events are published (at most a minute), failing t then.
func (h RelayHarness) WaitPublished(t *testing.T, n int) {
	t.Helper()
	WaitFor(t, relayWait, fmt.Sprintf("%d events published", n), func() bool { return h.count(t, publishedSQL) == n })
}

func (h RelayHarness) read(t *testing.T) []outbox.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), readTimeout)
	defer cancel()
	got, err := h.Read(ctx)
	if err != nil {
		t.Fatalf("read the broker: %v", err)
	}
	return got
}

// WaitFor polls cond every 20 ms until it holds, failing t (with what it waited
// for) after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// PoolRelayHarness returns a RelayHarness over pool (a migrated database of the
// test's own) for sink: events enqueued in one transaction each call, relays built
// with relay.New, read and setDown as [RelayHarness.Read] and [RelayHarness.SetDown].
func PoolRelayHarness(pool *pgxpool.Pool, sink outbox.Sink, read func(ctx context.Context) ([]outbox.Message, error), setDown func(bool)) RelayHarness {
	return RelayHarness{
		Enqueue: func(ctx context.Context, events []outbox.Event) error {
			return outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) })
		},
		QueryRow: func(ctx context.Context, sql string, dest ...any) error { return pool.QueryRow(ctx, sql).Scan(dest...) },
		NewRelay: func(cfg *relay.Config) (*relay.Relay, error) { return relay.New(pool, sink, cfg) },
		Read:     read,
		SetDown:  setDown,
	}
}
