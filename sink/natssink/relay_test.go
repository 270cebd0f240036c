package natssink_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

const (
	published = `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`
	touched   = `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND (attempts > 0 OR dead_at IS NOT NULL OR last_error IS NOT NULL)`
)

// 1,000 events over 50 aggregates go through the relay to JetStream and come back,
// through a plain ordered consumer, once each, intact, in order per aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	_, js := connect(t, startServer(t).ClientURL())
	st := createStream(t, js, "outbox")
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "e2e", 50, 20)
	runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want), published)
	got, _, err := readStream(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, want, got, true)
}

// With the server out of reach (a proxy stopped in between), the backlog grows and
// no event has an attempt counted or goes dead: the sink reports the outage and the
// relay's breaker holds. Once the proxy is back, everything arrives, at least once,
// in order of first delivery per aggregate.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	_, admin := connect(t, srv.ClientURL())
	st := createStream(t, admin, "outbox")
	p := newProxy(t, hostPort(t, srv.ClientURL()))
	_, js := connect(t, "nats://"+p.Listen)
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name, AckTimeout: time.Second, HealthTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "before", 10, 10)
	r := runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want), published)

	p.Stop()
	more := writeEvents(t, pool, "during", 20, 10)
	waitFor(t, 30*time.Second, "the breaker to open", func() bool { return r.Stats().BreakerOpens > 0 })
	// Down for 2 s more: the relay probes several times.
	time.Sleep(2 * time.Second) //nolint:forbidigo // the outage's length is the test's input
	if n := count(t, pool, published); n != len(want) {
		t.Fatalf("%d events published while the server was out of reach, want %d", n, len(want))
	}
	if n := count(t, pool, touched); n != 0 {
		var example string
		_ = pool.QueryRow(t.Context(), `SELECT coalesce(last_error, '') FROM outbox.events WHERE attempts > 0 LIMIT 1`).Scan(&example)
		t.Fatalf("%d events had an attempt counted or went dead during the outage, e.g. %q", n, example)
	}

	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	waitCount(t, pool, time.Minute, len(want), published)
	got, _, err := readStream(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, want, got, false)
}

// An event routed to a subject no stream takes is dead at once with a readable
// reason; the other aggregates flow.
func TestRelayNoStreamIsDead(t *testing.T) {
	t.Parallel()
	_, js := connect(t, startServer(t).ClientURL())
	st := createStream(t, js, "outbox")
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "ok", 10, 5)
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET topic = 'nowhere.orders' WHERE aggregate_id = 'ok-3' AND aggregate_version = 2`); err != nil {
		t.Fatal(err)
	}
	runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want)-4, published) // ok-3's versions 2 to 5 are held
	var lastError string
	var attempts int
	if err := pool.QueryRow(t.Context(), `SELECT last_error, attempts FROM outbox.events WHERE dead_at IS NOT NULL`).Scan(&lastError, &attempts); err != nil {
		t.Fatalf("the dead event: %v", err)
	}
	if attempts != 1 || !strings.Contains(lastError, `no stream takes subject "nowhere.orders"`) {
		t.Fatalf("dead after %d attempts with last_error %q, want 1 attempt and a reason naming the subject", attempts, lastError)
	}
}
