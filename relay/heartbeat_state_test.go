package relay_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Every heartbeat records the relay's breaker and counters in relay_members, so other
// processes (outboxadmin) see them: the breaker open while the sink is down, closed
// and the published count caught up once it is back — in both modes.
func TestHeartbeatReportsTheBreaker(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			sink := &memsink.Sink{}
			sink.SetDown(true)
			cfg := fastConfig()
			cfg.Mode = mode
			r := newRelay(t, pool, sink, cfg)
			start(t, r)
			enqueue(t, pool, aggregates("a", 5), 2)
			waitUntil(t, 10*time.Second, "the breaker open in Stats", func() bool { return !r.Stats().BreakerOpenUntil.IsZero() })
			waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.relay_members
				WHERE owner = $1 AND breaker_open_until IS NOT NULL AND breaker_opens >= 1 AND published = 0`, r.Owner())
			sink.SetDown(false)
			waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
			waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.relay_members
				WHERE owner = $1 AND breaker_open_until IS NULL AND published = 10 AND dead = 0`, r.Owner())
			if !r.Stats().BreakerOpenUntil.IsZero() {
				t.Fatal("Stats.BreakerOpenUntil set after the sink came back")
			}
		})
	}
}
