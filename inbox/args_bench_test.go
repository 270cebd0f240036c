package inbox

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

var argsSink []any

// takeArgs keeps its arguments, as a driver does: they escape, as they do into pgx.
//
//go:noinline
func takeArgs(args ...any) { argsSink = args }

// What binding by name costs per message over a positional argument list, for the
// statement every delivery runs (inbox_record, 6 parameters) and the widest
// (inbox_quarantine, 17).
func BenchmarkArgs(b *testing.B) {
	c := &Consumer{name: "billing", q: newQueries(`"outbox"`)}
	m := outbox.Message{
		ID: uuid.New(), Seq: 7, AggregateType: "order", AggregateID: "o-1", AggregateVersion: 3, EventType: "order.placed",
		SchemaVersion: 1, Topic: "orders", ContentType: "application/json", Payload: []byte(`{}`), CreatedAt: time.Now(),
	}
	b.Run("record/positional", func(b *testing.B) {
		for b.Loop() {
			takeArgs(c.name, m.ID, m.AggregateType, m.AggregateID, m.AggregateVersion, m.EventType)
		}
	})
	b.Run("record/named", func(b *testing.B) {
		for b.Loop() {
			takeArgs(c.q.record.Args(&recordParams{
				Aggregate: c.aggregate(m), EventID: m.ID, AggregateVersion: m.AggregateVersion, EventType: m.EventType,
			})...)
		}
	})
	b.Run("quarantine/positional", func(b *testing.B) {
		for b.Loop() {
			takeArgs(c.name, m.ID, m.AggregateType, m.AggregateID, m.AggregateVersion, m.Seq, m.EventType, m.SchemaVersion,
				m.Topic, nil, m.ContentType, m.Payload, m.TraceParent, m.CreatedAt, "panic", "boom", 1)
		}
	})
	b.Run("quarantine/named", func(b *testing.B) {
		for b.Loop() {
			p := quarantineParams{Event: c.storedEvent(&m, nil), Kind: "panic", Reason: "boom", Attempts: 1}
			takeArgs(c.q.quarantine.Args(&p)...)
		}
	})
}
