package outbox

import "testing"

// The cost of encoding one event and of binding its parameters to the statement by name
// (ADR 0018), per Enqueue call, against ≈ 100 µs for the statement's round trip.
func BenchmarkEncodeAndBind(b *testing.B) {
	e := Event{ID: NewID(), AggregateType: "account", AggregateID: "42", EventType: "account.credited", ContentType: "application/json", SchemaVersion: 1, Payload: []byte(`{"amount":1}`)}
	batch := make([]Event, 100)
	for i := range batch {
		batch[i] = e
		batch[i].ID = NewID()
	}
	w := defaultWriter
	for _, c := range []struct {
		name   string
		tx     Tx
		events []Event
	}{{"pgx/one", pgxTx{}, []Event{e}}, {"sql/one", sqlTx{}, []Event{e}}, {"pgx/100", pgxTx{}, batch}, {"sql/100", sqlTx{}, batch}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, args := w.stmts.bind(c.tx.encode(c.events, true))
				if len(args) == 0 {
					b.Fatal("no args")
				}
			}
		})
	}
}

// NewWriter renders (cached per schema) and binds its four statements.
func BenchmarkNewWriter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewWriter(&WriterConfig{Schema: "bench_schema"}); err != nil {
			b.Fatal(err)
		}
	}
}
