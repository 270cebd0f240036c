package outboxprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cdc"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxprom"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A change-data-capture Source on a real slot: the collector exports that it streams,
// the events it read and published, and its slot's state.
func TestCDCCollector(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{Mode: relay.Unordered, Wakeup: relay.WakeupPoll, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	src, err := cdc.New(pool, r, &cdc.Config{Slot: "prom_collector", StatusInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = r.Run(ctx); done <- struct{}{} }()
	go func() { _ = src.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
		_, _ = pool.Exec(context.Background(), `SELECT pg_drop_replication_slot('prom_collector')`)
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(outboxprom.NewCDCCollector(src))
	for deadline := time.Now().Add(20 * time.Second); !src.Stats().Streaming; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Source did not stream within 20s")
		}
	}
	time.Sleep(200 * time.Millisecond) // the new slot's wake-up of the polling claims found nothing
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "e"},
			outbox.Event{AggregateType: "order", AggregateID: "2", EventType: "e"})
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); gauge(t, reg, "outbox_cdc_events_published_total") != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("outbox_cdc_events_published_total = %v after 20s, want 2", gauge(t, reg, "outbox_cdc_events_published_total"))
		}
	}
	for name, want := range map[string]float64{"outbox_cdc_streaming": 1, "outbox_cdc_events_read_total": 2, "outbox_cdc_events_left_total": 0} {
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := gauge(t, reg, "outbox_cdc_slot_wal_status", "status", "reserved"); got != 1 {
		t.Errorf(`outbox_cdc_slot_wal_status{status="reserved"} = %v, want 1`, got)
	}
	if got := gauge(t, reg, "outbox_cdc_confirmed_age_seconds"); got < 0 || got > 10 {
		t.Errorf("outbox_cdc_confirmed_age_seconds = %v, want a few seconds at most", got)
	}
	if got := gauge(t, reg, "outbox_cdc_slot_retained_wal_bytes"); got <= 0 {
		t.Errorf("outbox_cdc_slot_retained_wal_bytes = %v, want some", got)
	}
}
