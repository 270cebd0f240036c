package outboxprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxprom"
)

// A producer's Notifier, on a real database: the collector exports its requests and the
// notifications it sent, coalesced, none failed.
func TestNotifierCollector(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	n, err := outbox.NewNotifier(pool, &outbox.NotifierConfig{MinInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(outboxprom.NewNotifierCollector(n))
	n.AfterCommit(context.Background()) // sent at once
	for deadline := time.Now().Add(10 * time.Second); n.Stats().Sent < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first wake-up was not sent within 10s")
		}
	}
	for range 9 {
		n.AfterCommit(context.Background()) // these wait out the hour, as one
	}
	n.Close() // sends the pending one
	for name, want := range map[string]float64{
		"outbox_notifier_requests_total":    10,
		"outbox_notifier_sends_total":       2,
		"outbox_notifier_send_errors_total": 0,
	} {
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
