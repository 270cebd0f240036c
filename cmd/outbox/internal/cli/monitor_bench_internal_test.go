package cli

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/relay"
)

// BenchmarkObserverBatch is the metrics' cost on the relay's path: one BatchSettled of
// a 100-event batch (4 event types), what each batch pays with metrics on.
func BenchmarkObserverBatch(b *testing.B) {
	m := newMonitor(nil, defaults())
	rep := relay.BatchReport{Duration: 3 * time.Millisecond}
	types := []string{"order.created", "order.paid", "user.renamed", "invoice.sent"}
	now := time.Now()
	for i := range 100 {
		rep.Events = append(rep.Events, relay.EventReport{ID: uuid.New(), EventType: types[i%4], AggregateType: "order", Attempt: 1, Outcome: relay.OutcomePublished, CreatedAt: now})
	}
	b.ReportAllocs()
	for b.Loop() {
		m.BatchSettled(rep)
	}
}
