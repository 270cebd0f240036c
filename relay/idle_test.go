package relay_test

import (
	"testing"
	"time"

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
	// Settle in: leases taken (ordered) or membership announced (unordered), listener
	// self-tested.
	if mode == relay.Ordered {
		waitSQL(t, pool, 20*time.Second, 16, `SELECT count(*) FROM outbox.leases WHERE owner = $1`, r.Owner())
	} else {
		waitSQL(t, pool, 20*time.Second, 1, `SELECT count(*) FROM outbox.relay_members WHERE owner = $1`, r.Owner())
	}
	waitUntil(t, 10*time.Second, "the listener to come up", func() bool { return r.Stats().WakeupListening })
	// the listener's self-test notification wakes the workers: their claims and probes
	// follow it by a few milliseconds, and counted in the window they made an idle
	// unordered relay's 7 queries 11 to 13 in some runs
	time.Sleep(time.Second) //nolint:forbidigo // the start-up's queries end
	before := queries.n.Load()
	const window = 10 * time.Second
	time.Sleep(window) //nolint:forbidigo // the idle window is what is measured
	n := queries.n.Load() - before
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
