package outboxprom_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxprom"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The metrics of a relay run in-process, gathered from a registry, equal the database
// after a known scenario: 20 events published, 1 dead holding its aggregate (and the
// event behind it), a backlog an hour old.
func TestMetricsEqualTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var events []outbox.Event
	for i := range 20 {
		events = append(events, outbox.Event{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: "order.created", Payload: []byte(`{}`)})
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, created_at, dead_at, attempts, last_error)
		VALUES (gen_random_uuid(), 'order', 'held', 'order.paid', now() - interval '2 hours', now(), 3, 'refused');
		INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, created_at)
		VALUES (gen_random_uuid(), 'order', 'held', 'order.paid', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	m := outboxprom.New(pool, &outboxprom.Options{Interval: 20 * time.Millisecond})
	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{Observer: m, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(r)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	go m.Run(runCtx)
	deadline := time.Now().Add(20 * time.Second)
	for len(sink.Messages()) < 20 || gauge(t, reg, "outbox_pending_events") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d published, pending gauge %v", len(sink.Messages()), gauge(t, reg, "outbox_pending_events"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, sql := range map[string]string{
		"outbox_published_total":    `SELECT count(*)::float8 FROM outbox.events WHERE published_at IS NOT NULL`,
		"outbox_pending_events":     `SELECT count(*)::float8 FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL`,
		"outbox_dead_events":        `SELECT count(*)::float8 FROM outbox.dead_letters`,
		"outbox_blocked_aggregates": `SELECT count(DISTINCT (aggregate_type, aggregate_id))::float8 FROM outbox.dead_letters`,
		"outbox_database_up":        `SELECT 1::float8`,
		"outbox_leases_held":        `SELECT count(*)::float8 FROM outbox.leases WHERE owner = '` + r.Owner() + `' AND expires_at > now()`,
	} {
		var want float64
		if err := pool.QueryRow(ctx, sql).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, the database %v", name, got, want)
		}
	}
	if age := gauge(t, reg, "outbox_oldest_pending_age_seconds"); age < 3590 || age > 3700 {
		t.Errorf("outbox_oldest_pending_age_seconds = %v, want about 3600", age)
	}
	if n := gauge(t, reg, "outbox_publish_latency_seconds"); n != 20 {
		t.Errorf("outbox_publish_latency_seconds holds %v samples, want 20", n)
	}
	if n := gauge(t, reg, "outbox_events_total", "event_type", "order.created", "outcome", "published"); n != 20 {
		t.Errorf("outbox_events_total{order.created,published} = %v, want 20", n)
	}
	// the held event is a blocked aggregate's, not the relay's backlog: no stall
	if s := m.Stalled(); s > time.Second {
		t.Errorf("Stalled() = %s with only a blocked aggregate left", s)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// gauge is the value of the metric name (a histogram's sample count) whose labels
// include labels (name, value pairs); it fails t when there is none.
func gauge(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return -1
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}

// BenchmarkObserverBatch is the metrics' cost on the relay's path: one BatchSettled of
// a 100-event batch (4 event types), what each batch pays with metrics on.
func BenchmarkObserverBatch(b *testing.B) {
	m := outboxprom.New(nil, nil)
	rep := relay.BatchReport{Duration: 3 * time.Millisecond}
	types := []string{"order.created", "order.paid", "user.renamed", "invoice.sent"}
	now := time.Now()
	for i := range 100 {
		rep.Events = append(rep.Events, relay.EventReport{EventType: types[i%4], AggregateType: "order", Attempt: 1, Outcome: relay.OutcomePublished, CreatedAt: now})
	}
	b.ReportAllocs()
	for b.Loop() {
		m.BatchSettled(rep)
	}
}

// Collected before Watch (a registry scraped while the relay is being built), the
// metrics hold what the Observer saw and nothing else: no panic.
func TestCollectBeforeWatch(t *testing.T) {
	t.Parallel()
	m := outboxprom.New(nil, nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.BatchSettled(relay.BatchReport{Events: []relay.EventReport{{EventType: "e", Outcome: relay.OutcomePublished, CreatedAt: time.Now()}}})
	if got := gauge(t, reg, "outbox_events_total", "event_type", "e", "outcome", "published"); got != 1 {
		t.Fatalf("outbox_events_total = %v before Watch, want 1", got)
	}
	if got := gauge(t, reg, "outbox_published_total"); got != -1 {
		t.Fatalf("outbox_published_total present (%v) before Watch", got)
	}
}
