package relay_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Ordered scale-out with a backlog: relays that join a relay already draining a backlog,
// and relays started together on one, each get their share of the partitions within
// about one LeaseTTL — handed over at a batch boundary, so per-aggregate order holds —
// and publish, without waiting for the backlog to end.
func TestRelaysJoiningABacklogTakeTheirShare(t *testing.T) {
	t.Parallel()
	for _, joining := range []bool{true, false} {
		name := "started-together"
		if joining {
			name = "joining-a-draining-relay"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			enqueue(t, pool, aggregates("j", 400), 10) // 4,000 events
			shared := &memsink.Sink{}
			cfg := func() *relay.Config {
				c := fastConfig()
				c.BatchSize, c.MaxPerAggregate = 10, 1 // ~10 events per 20 ms call: the backlog lasts
				return c
			}
			sinks := make([]*slowSink, 4) // per relay, counting what it published, so a backlog lasts while relays join
			for i := range sinks {
				sinks[i] = &slowSink{inner: shared, delay: 20 * time.Millisecond}
			}
			first := 0
			if joining {
				start(t, newRelay(t, pool, sinks[0], cfg()))
				waitFor(t, shared, 10*time.Second, "the first relay to publish", func(m []outbox.Message) bool { return len(m) >= 100 })
				first = 1
			}
			joined := time.Now()
			for _, s := range sinks[first:] {
				start(t, newRelay(t, pool, s, cfg()))
			}
			// Within about one LeaseTTL (1 s here), every relay publishes.
			eventually(time.Until(joined.Add(2500*time.Millisecond)), func() bool {
				for _, s := range sinks {
					if s.published.Load() == 0 {
						return false
					}
				}
				return true
			})
			counts := make([]int64, len(sinks))
			for i, s := range sinks {
				counts[i] = s.published.Load()
			}
			backlog := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
			for i, n := range counts {
				if n == 0 {
					t.Fatalf("%s after joining, with %d events still pending: relay %d published nothing (published per relay: %v)",
						time.Since(joined).Round(time.Millisecond), backlog, i, counts)
				}
			}
			t.Logf("published per relay %s after joining: %v; %d pending", time.Since(joined).Round(time.Millisecond), counts, backlog)
			waitSQL(t, pool, 60*time.Second, 0, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`)
			checkOrder(t, shared.Messages())
		})
	}
}

// Relays started together on a backlog, polling only once a minute, drain it on their
// wake-ups alone: the heartbeats that deal partitions and workers out (leases acquired,
// the count of live relays changing each relay's share of the default concurrency) must
// wake every worker that has work, or the backlog waits for a poll a minute away.
func TestRelaysStartedTogetherLoseNoWakeUp(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, aggregates("c", 400), 100) // 40,000 events
	shared := &memsink.Sink{}
	began := time.Now()
	var relays []*relay.Relay
	for range 4 {
		c := fastConfig()
		c.BatchSize, c.MaxPerAggregate = 1000, 200
		c.PollInterval, c.FallbackPollInterval = time.Minute, time.Minute
		c.LeaseTTL = relay.DefaultLeaseTTL
		// 5 ms a call: the drain outlasts the relays' first heartbeats, so the deal changes under it
		r := newRelay(t, pool, &slowSink{inner: shared, delay: 5 * time.Millisecond}, c)
		relays = append(relays, r)
		start(t, r)
	}
	if !eventually(40*time.Second, func() bool {
		return queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`) == 0
	}) {
		for _, r := range relays {
			t.Logf("relay %s: floor %d, %+v", r.Owner()[:8], relay.FloorOf(r), r.Stats())
		}
		rows, _ := pool.Query(t.Context(), `SELECT e.partition * 16 / 4096 AS rp, count(*), min(e.seq), l.owner, l.epoch, l.expires_at > now()
			FROM outbox.events e LEFT JOIN outbox.leases l ON l.partition = e.partition * 16 / 4096
			WHERE e.published_at IS NULL GROUP BY 1, 4, 5, 6 ORDER BY 1`)
		for rows.Next() {
			var rp, n int
			var minSeq int64
			var owner *string
			var epoch *int64
			var live *bool
			_ = rows.Scan(&rp, &n, &minSeq, &owner, &epoch, &live)
			o := "-"
			if owner != nil {
				o = (*owner)[:8]
			}
			t.Logf("pending: relay partition %d: %d events from seq %d, lease %s epoch %v live %v", rp, n, minSeq, o, epoch, live)
		}
		rows.Close()
		t.Fatalf("not drained after 40 s")
	}
	t.Logf("drained in %s", time.Since(began).Round(time.Millisecond))
	checkOrder(t, shared.Messages())
}
