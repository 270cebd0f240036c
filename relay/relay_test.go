package relay_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
)

func TestPublishesEverythingInOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("a", 20), 15)
			sink := newTestSink()
			cfg := fastConfig()
			cfg.Mode = mode
			cfg.BatchSize = 17
			start(t, newRelay(t, pool, sink, cfg))
			msgs := sink.waitFor(t, 30*time.Second, "300 events", func(m []outbox.Message) bool { return distinctIDs(m) == 300 })
			if mode == relay.Ordered {
				checkOrder(t, msgs)
			}
			waitSQL(t, pool, 10*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
			if len(msgs) != 300 {
				t.Fatalf("%d deliveries for 300 events without faults", len(msgs))
			}
		})
	}
}
