package relay_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// An idle relay with the default settings (ordered, leases, LISTEN wake-ups; and
// unordered, whose two workers share the membership heartbeat) costs at most 1 query per
// second, and still wakes within milliseconds of a notified commit.
func TestIdleRelayCostsAtMostOneQueryPerSecond(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			idleRelayCost(t, mode)
		})
	}
}

func idleRelayCost(t *testing.T, mode relay.Mode) {
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	relayPool, queries := countedPool(t, connString)
	sink := &memsink.Sink{}
	r := newRelay(t, relayPool, sink, &relay.Config{Mode: mode})
	start(t, r)
	// Settle in: membership announced (unordered; idleQueries waits for the leases and
	// the listener).
	if mode == relay.Unordered {
		waitSQL(t, pool, 20*time.Second, 1, `SELECT count(*) FROM outbox.relay_members WHERE owner = $1`, r.Owner())
	}
	const window = 10 * time.Second
	n := idleQueries(t, pool, r, queries, window)
	t.Logf("idle relay: %d queries in %s", n, window)
	if float64(n) > window.Seconds() {
		t.Fatalf("idle relay sent %d queries in %s, want at most 1 per second", n, window)
	}

	// A commit announced by a Notifier is published long before the 5 s fallback poll.
	notifier, err := outbox.NewNotifier(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer notifier.Close()
	enqueue(t, pool, []string{"idle"}, 1)
	notifier.AfterCommit(t.Context())
	began := time.Now()
	waitFor(t, sink, 3*time.Second, "the notified event", func(m []outbox.Message) bool { return len(m) == 1 })
	t.Logf("woken and published %s after the notify", time.Since(began))
}

// An ordered relay beside a backlog its claims cannot take — events held behind a dead
// one — stays idle: its probe reports the backlog, and the first report makes the relay
// busy (ADR 0035), but a report while busy wakes no worker again. When every such report
// woke the workers, each worker probed and claimed nothing in a tight loop.
func TestIdleRelayBesideAHeldBacklogDoesNotSpin(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	enqueue(t, pool, []string{"held"}, 101)
	execSQL(t, pool, `UPDATE outbox.events SET dead_at = now(), attempts = 1, last_error = 'refused'
		WHERE seq = (SELECT min(seq) FROM outbox.events)`)
	relayPool, queries := countedPool(t, connString)
	r := newRelay(t, relayPool, &memsink.Sink{}, &relay.Config{Mode: relay.Ordered})
	start(t, r)
	const window = 5 * time.Second
	if n := idleQueries(t, pool, r, queries, window); float64(n) > 2*window.Seconds() {
		t.Fatalf("a relay beside a held backlog sent %d queries in %s, want at most 2 per second", n, window)
	}
}

// idleQueries counts the queries r sends through its counted pool in window, once it has
// settled in: leases taken (ordered), listener self-tested, and a second more. The
// self-test's notification wakes the workers, and their claims and probes follow it by a
// few milliseconds: counted in the window, they made an idle unordered relay's 7 queries
// 11 to 13 in some runs.
func idleQueries(t *testing.T, pool *pgxpool.Pool, r *relay.Relay, queries *queryCounter, window time.Duration) int64 {
	t.Helper()
	if r.Config().Mode == relay.Ordered {
		waitSQL(t, pool, 20*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
	}
	waitUntil(t, 10*time.Second, "the listener to come up", func() bool { return r.Stats().WakeupListening })
	time.Sleep(time.Second) //nolint:forbidigo // the start-up's queries end
	before := queries.n.Load()
	time.Sleep(window) //nolint:forbidigo // the idle window is what is measured
	return queries.n.Load() - before
}

// A relay that is not busy, woken on a backlog while its sink is down, drains it once the
// sink is back. A by-seq batch (the CDC path) found the sink down and woke the workers; a
// worker passed the breaker as its probe, then its own probe found the backlog and sent
// it round again to claim from its new share (ADR 0035). Without giving the breaker's
// probe back, no batch ever ended it, and the relay claimed nothing more, with polls an
// hour apart (cdc's TestSinkOutageUnderCDC: 20 of 120 events after 30 s).
func TestBacklogFoundDuringAnOutageDrainsAfterIt(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := fastConfig()
	cfg.Mode = relay.Ordered
	cfg.Wakeup = relay.WakeupPoll
	cfg.PollInterval, cfg.FallbackPollInterval = time.Hour, time.Hour
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	waitSQL(t, pool, 20*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
	time.Sleep(100 * time.Millisecond) // the start's claims are done: idle
	sink.SetDown(true)
	ids := aggregates("during", 100)
	enqueue(t, pool, ids, 1)
	if _, err := r.PublishSeqs(t.Context(), seqsOf(t, pool, ids...)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the breaker to open", func() bool { return r.Stats().BreakerOpens > 0 })
	time.Sleep(time.Second) //nolint:forbidigo // several of the breaker's probes
	sink.SetDown(false)
	waitFor(t, sink, 10*time.Second, "the backlog written during the outage", distinct(100))
}
