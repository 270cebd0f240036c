package jsonlsink_test

import (
	"context"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/jsonlsink"
)

// Write messages to stdout: a JSON payload as itself, any other as base64.
func Example() {
	sink := jsonlsink.New(os.Stdout)
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sink.Publish(context.Background(), []outbox.Message{
		{
			ID: uuid.MustParse("019c8f2a-0000-7000-8000-000000000001"), Seq: 1,
			AggregateType: "order", AggregateID: "o-1", AggregateVersion: 1,
			EventType: "order.created", SchemaVersion: 1, Headers: map[string]string{"tenant": "acme"},
			ContentType: "application/json", Payload: []byte(`{"total": 42}`),
			CreatedAt: created, Attempt: 1,
		},
		{
			ID: uuid.MustParse("019c8f2a-0000-7000-8000-000000000002"), Seq: 2,
			AggregateType: "order", AggregateID: "o-1", AggregateVersion: 2,
			EventType: "order.scanned", SchemaVersion: 1, Topic: "scans",
			ContentType: "image/png", Payload: []byte("\x89PNG"),
			CreatedAt: created, Attempt: 1,
		},
	})
	// Output:
	// {"id":"019c8f2a-0000-7000-8000-000000000001","seq":1,"aggregate_type":"order","aggregate_id":"o-1","aggregate_version":1,"event_type":"order.created","schema_version":1,"headers":{"tenant":"acme"},"content_type":"application/json","payload_encoding":"json","payload":{"total":42},"created_at":"2026-03-01T12:00:00Z","attempt":1}
	// {"id":"019c8f2a-0000-7000-8000-000000000002","seq":2,"aggregate_type":"order","aggregate_id":"o-1","aggregate_version":2,"event_type":"order.scanned","schema_version":1,"topic":"scans","content_type":"image/png","payload_encoding":"base64","payload":"iVBORw==","created_at":"2026-03-01T12:00:00Z","attempt":1}
}
