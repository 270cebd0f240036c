package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A type's rate (Config.TypeRates) bounds how fast the schema's relays claim it,
// together, with one relay or several, while another type's events go out at once: a
// backlog of 1,500 "bulk" events over 50 aggregates at 500 a second drains in about
// three seconds, no second of it above the rate by more than a bucket (a tenth of a
// second) and one claim's overshoot, and 20 "quiet" events written after it are
// delivered within a second. Without the rates the backlog drains in a fraction of a
// second.
func TestTypeRateBoundsItsType(t *testing.T) {
	t.Parallel()
	for _, relays := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d relays", relays), func(t *testing.T) {
			t.Parallel()
			const (
				rate   = 500.0
				events = 1500
			)
			pool := pgtest.Pool(t)
			sink := &memsink.Sink{}
			execSQL(t, pool, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type)
				SELECT gen_random_uuid(), 'bulk', 'b' || ((g - 1) % 50), (g - 1) / 50 + 1, 'bulk.x' FROM generate_series(1, 1500) g`)
			for range relays {
				cfg := fastConfig()
				// no wake-up comes for a type its rate held back, nor a poll soon: the relay
				// looks again when the type's bucket is full
				cfg.PollInterval, cfg.FallbackPollInterval = 0, 0
				cfg.TypeRates = map[string]float64{"bulk": rate}
				start(t, newRelay(t, pool, sink, cfg))
			}
			time.Sleep(200 * time.Millisecond)
			quietAt := time.Now()
			execSQL(t, pool, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type)
				SELECT gen_random_uuid(), 'quiet', 'q' || g, 1, 'quiet.x' FROM generate_series(1, 20) g`)
			waitDelivered(t, sink, "q", 20, 5*time.Second, "the quiet type waits behind the rate-limited one")
			if d := lastDeliveredAt(sink, "q").Sub(quietAt); d > time.Second {
				t.Errorf("the quiet events took %s to go out beside the rate-limited type", d)
			}
			waitDelivered(t, sink, "b", events, 30*time.Second, "the rate-limited type does not drain")

			var at []time.Time
			for _, d := range sink.Deliveries() {
				if strings.HasPrefix(d.Message.AggregateID, "b") {
					at = append(at, d.At)
				}
			}
			took := at[len(at)-1].Sub(at[0])
			// the first bucket is full (rate/10); relays learn of each other at a heartbeat
			if want := time.Duration(float64(events-relays*int(rate)/10) / rate * 0.8 * float64(time.Second)); took < want {
				t.Errorf("%d events of a type limited to %v a second drained in %s, want at least %s", events, rate, took, want)
			}
			if took > 3*time.Duration(float64(events)/rate*float64(time.Second)) {
				t.Errorf("%d events of a type limited to %v a second drained in %s: far below the rate", events, rate, took)
			}
			// no second above the rate by more than a fifth, the relays' buckets and a claim's
			// overshoot each (one head of MaxPerAggregate events beyond what the bucket holds)
			most, limit := 0, int(rate*1.2)+relays*(int(rate)/10+relay.DefaultMaxPerAggregate)
			for i, j := 0, 0; i < len(at); i++ {
				for at[i].Sub(at[j]) > time.Second {
					j++
				}
				most = max(most, i-j+1)
			}
			if most > limit {
				t.Errorf("%d events of a type limited to %v a second went out within one second (at most %d expected)", most, rate, limit)
			}
			t.Logf("%d relays: %d events in %s (%.0f a second), at most %d within a second", relays, len(at), took, float64(len(at))/took.Seconds(), most)
			checkOrder(t, sink.Messages())
		})
	}
}

// lastDeliveredAt returns when the last event of an aggregate with prefix was delivered.
func lastDeliveredAt(s *memsink.Sink, prefix string) time.Time {
	var last time.Time
	for _, d := range s.Deliveries() {
		if strings.HasPrefix(d.Message.AggregateID, prefix) && d.At.After(last) {
			last = d.At
		}
	}
	return last
}
