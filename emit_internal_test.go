package outbox

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/internal/emitted"
)

// What Emit writes is what the CDC reader decodes: every field of an event, a JSON
// payload byte for byte, a binary one, headers with characters JSON escapes, a schedule.
func TestEmittedRowsDecodeAsWritten(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	events := []Event{
		{
			ID: uuid.New(), AggregateType: "order", AggregateID: "a\"1\n", AggregateVersion: 9, EventType: "order.paid",
			SchemaVersion: 2, Topic: "orders.paid", Headers: map[string]string{"k": "v\u2028\"", "tenant": "t"},
			ContentType: "application/vnd.x+json", Payload: []byte(`{ "b":1,  "a":[1e400] }`), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			AvailableAt: at,
		},
		{ID: uuid.New(), AggregateType: "doc", AggregateID: "d", EventType: "doc.saved", SchemaVersion: 1, ContentType: "application/octet-stream", Payload: []byte{0, 0xff, '"'}},
		{ID: uuid.New(), AggregateType: "doc", AggregateID: "d", EventType: "doc.empty", SchemaVersion: 1, ContentType: ContentTypeJSON},
	}
	rows, err := emitted.Decode([]byte(newJSONParams(events, false).Rows))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(events) {
		t.Fatalf("%d rows decoded, want %d", len(rows), len(events))
	}
	for i, r := range rows {
		e := events[i]
		if r.ID != e.ID || r.AggregateType != e.AggregateType || r.AggregateID != e.AggregateID || r.AggregateVersion != e.AggregateVersion ||
			r.EventType != e.EventType || r.SchemaVersion != e.SchemaVersion || r.Topic != e.Topic || len(r.Headers) != len(e.Headers) ||
			r.ContentType != e.ContentType || !bytes.Equal(r.PayloadBytes(), e.Payload) || r.TraceParent != e.TraceParent || !r.AvailableAt.Equal(e.AvailableAt) {
			t.Errorf("row %d decoded as %+v, want %+v", i, r, e)
		}
		for k, v := range e.Headers {
			if r.Headers[k] != v {
				t.Errorf("row %d header %q = %q, want %q", i, k, r.Headers[k], v)
			}
		}
	}
	if emitted.ContentTypeJSON != ContentTypeJSON {
		t.Fatalf("emitted.ContentTypeJSON %q differs from ContentTypeJSON %q", emitted.ContentTypeJSON, ContentTypeJSON)
	}
}

// Content that is not the Writer's is refused, naming what is wrong.
func TestEmittedContentNotTheWritersIsRefused(t *testing.T) {
	id := uuid.New().String()
	for name, content := range map[string]string{
		"not JSON":         `{`,
		"not an array":     `{"id":"` + id + `"}`,
		"no id":            `[{"aggregate_type":"a","aggregate_id":"b","event_type":"c","schema_version":1}]`,
		"no event type":    `[{"id":"` + id + `","aggregate_type":"a","aggregate_id":"b","schema_version":1}]`,
		"schema version 0": `[{"id":"` + id + `","aggregate_type":"a","aggregate_id":"b","event_type":"c","schema_version":0}]`,
		"bytes for JSON":   `[{"id":"` + id + `","aggregate_type":"a","aggregate_id":"b","event_type":"c","schema_version":1,"payload_b64":"AA=="}]`,
		"JSON for bytes":   `[{"id":"` + id + `","aggregate_type":"a","aggregate_id":"b","event_type":"c","schema_version":1,"content_type":"text/plain","payload":{}}]`,
		"NUL in a field":   `[{"id":"` + id + `","aggregate_type":"a","aggregate_id":"b\u0000","event_type":"c","schema_version":1}]`,
		"NUL in a header":  `[{"id":"` + id + `","aggregate_type":"a","aggregate_id":"b","event_type":"c","schema_version":1,"headers":{"k":"\u0000"}}]`,
	} {
		if _, err := emitted.Decode([]byte(content)); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}
