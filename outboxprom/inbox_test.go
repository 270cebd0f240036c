package outboxprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxprom"
)

// The consumers' reports, on a real database, become counters by consumer and kind:
// applied, duplicate, parked then unparked, and a gap refused under GapRetry.
func TestInboxMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	m := outboxprom.NewInboxMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	billing, err := inbox.New(&inbox.Config{Name: "billing", Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	mailer, err := inbox.New(&inbox.Config{Name: "mailer", Gap: inbox.GapRetry, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(agg string, v int64) outbox.Message {
		return outbox.Message{
			ID: outbox.NewID(), AggregateType: "order", AggregateID: agg, AggregateVersion: v, EventType: "order.changed",
			SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: []byte(`{}`), CreatedAt: time.Now().Add(-time.Second),
		}
	}
	ok := func(context.Context, pgx.Tx, outbox.Message) error { return nil }
	v1, v2, v3 := msg("o-1", 1), msg("o-1", 2), msg("o-1", 3)
	for _, step := range []struct {
		c *inbox.Consumer
		m outbox.Message
	}{{billing, v1}, {billing, v1}, {billing, v3}, {billing, v2}, {mailer, msg("o-2", 2)}} {
		_, _ = step.c.Process(ctx, pool, step.m, ok)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"outbox_inbox_events_total", []string{"consumer", "billing", "kind", "applied"}, 3},
		{"outbox_inbox_events_total", []string{"consumer", "billing", "kind", "duplicate"}, 1},
		{"outbox_inbox_events_total", []string{"consumer", "billing", "kind", "parked"}, 1},
		{"outbox_inbox_events_total", []string{"consumer", "billing", "kind", "unparked"}, 1},
		{"outbox_inbox_errors_total", []string{"consumer", "mailer", "reason", "gap"}, 1},
		{"outbox_inbox_handler_duration_seconds", []string{"consumer", "billing"}, 4},
		{"outbox_inbox_lag_seconds", []string{"consumer", "billing"}, 2},
	} {
		if got := gauge(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
