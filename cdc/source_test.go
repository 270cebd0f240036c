package cdc

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// In each mode, events committed while the Source runs are published by change data
// capture (the relay polls once an hour), every one of them, each aggregate in order,
// written by concurrent transactions; what was published is confirmed to the server.
func TestSourcePublishesWhatCommits(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			sink := &memsink.Sink{}
			r := newRelay(t, pool, sink, mode)
			s := newSource(t, pool, r, slotName(t, pool))
			startSource(t, pool, s)
			done := make(chan struct{})
			for w := range 4 {
				go func() {
					defer func() { done <- struct{}{} }()
					for v := 1; v <= 10; v++ {
						write(t, pool, ids(string(rune('a'+w)), 10), v, 1)
					}
				}()
			}
			for range 4 {
				<-done
			}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("source stats: %+v", s.Stats())
					rows, _ := pool.Query(context.Background(), `SELECT seq, xmin::text, aggregate_id FROM outbox.events WHERE published_at IS NULL ORDER BY seq`)
					for rows.Next() {
						var seq int64
						var x, a string
						_ = rows.Scan(&seq, &x, &a)
						t.Logf("pending: seq %d xmin %s %s", seq, x, a)
					}
					rows.Close()
					var info string
					_ = pool.QueryRow(context.Background(), `SELECT row_to_json(r)::text FROM (SELECT s.*, pg_current_wal_lsn() AS cur, pg_current_wal_flush_lsn() AS fl FROM pg_replication_slots s WHERE slot_name = $1) r`, s.cfg.Slot).Scan(&info)
					t.Logf("slot: %s", info)
				}
			})
			msgs := waitDelivered(t, sink, 400, 30*time.Second)
			if mode == relay.Ordered {
				checkOrder(t, msgs)
			}
			waitUntil(t, 10*time.Second, "400 events read and published by change data capture", func() bool {
				st := s.Stats()
				return st.Events == 400 && st.Published == 400
			})
			waitConfirmedPastNow(t, pool, s.cfg.Slot)
		})
	}
}

// A sink outage under change data capture (the relay's sink-outage test, in CDC mode),
// in each mode: the events written while the sink is down are confirmed as left to the
// polling claims, which wait for the breaker, probe, and publish them all (in order, in
// ordered mode) once the sink is back — none lost, though the relay polls only once an
// hour, and the Source's by-seq batches never hold the breaker's probe they took.
func TestSinkOutageUnderCDC(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.Mode{relay.Ordered, relay.Unordered} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Pool(t)
			sink := &memsink.Sink{}
			r := runRelay(t, pool, sink, &relay.Config{
				Mode: mode, Wakeup: relay.WakeupPoll, PollInterval: time.Hour, LeaseTTL: 30 * time.Second, SlowPublish: time.Minute,
				BreakerInitialDelay: 100 * time.Millisecond, BreakerMaxDelay: 400 * time.Millisecond, Logger: testLogger,
			})
			s := newSource(t, pool, r, slotName(t, pool))
			startSource(t, pool, s)
			write(t, pool, ids("before", 10), 1, 2)
			waitDelivered(t, sink, 20, 30*time.Second)
			sink.SetDown(true)
			for v := 1; v <= 5; v++ {
				write(t, pool, ids("during", 20), v, 1)
			}
			waitUntil(t, 20*time.Second, "the Source has read the events written during the outage", func() bool { return s.Stats().Events == 120 })
			time.Sleep(500 * time.Millisecond) // several breaker probes fail
			if n := sink.Count(); n != 20 {
				t.Fatalf("%d delivered while the sink was down", n-20)
			}
			sink.SetDown(false)
			msgs := waitDelivered(t, sink, 120, 30*time.Second)
			if mode == relay.Ordered {
				checkOrder(t, msgs)
			}
		})
	}
}
