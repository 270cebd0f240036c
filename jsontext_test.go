package outbox

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// appendRow must produce JSON that encoding/json reads back to the same values,
// whatever the strings hold.
func TestAppendRowRoundTrips(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	e := Event{
		ID: NewID(), AggregateType: "ord\"er\\", AggregateID: "a\tb\nc\x01é😀", AggregateVersion: 7, EventType: "t\u2028",
		SchemaVersion: 2, Topic: "top/ic", Headers: map[string]string{"k\"": "v\\", "x": "é"}, ContentType: "application/json",
		Payload: []byte(`{"a": [1, 2]}`), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", AvailableAt: at,
	}
	var got struct {
		Ord              int               `json:"ord"`
		ID               string            `json:"id"`
		AggregateType    string            `json:"aggregate_type"`
		AggregateID      string            `json:"aggregate_id"`
		AggregateVersion int64             `json:"aggregate_version"`
		EventType        string            `json:"event_type"`
		SchemaVersion    int               `json:"schema_version"`
		Topic            string            `json:"topic"`
		Headers          map[string]string `json:"headers"`
		ContentType      string            `json:"content_type"`
		Payload          json.RawMessage   `json:"payload"`
		PayloadB64       []byte            `json:"payload_b64"`
		TraceParent      string            `json:"trace_parent"`
		AvailableAt      time.Time         `json:"available_at"`
	}
	b := appendRow(nil, 3, &e)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if got.Ord != 3 || got.ID != e.ID.String() || got.AggregateType != e.AggregateType || got.AggregateID != e.AggregateID ||
		got.AggregateVersion != 7 || got.EventType != e.EventType || got.SchemaVersion != 2 || got.Topic != e.Topic ||
		got.Headers["k\""] != "v\\" || got.Headers["x"] != "é" || string(got.Payload) != string(e.Payload) ||
		got.TraceParent != e.TraceParent || !got.AvailableAt.Equal(at) {
		t.Fatalf("round trip differs:\n%s\n%+v", b, got)
	}
	bin := Event{ID: NewID(), AggregateType: "a", AggregateID: "b", EventType: "c", ContentType: "application/octet-stream", Payload: []byte{0, 255, '"'}}
	if err := json.Unmarshal(appendRow(nil, 0, &bin), &got); err != nil || string(got.PayloadB64) != string(bin.Payload) {
		t.Fatalf("binary payload: %v %v", got.PayloadB64, err)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("plain")
	f.Add("quo\"te\\ \x00\x1f é 😀")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		var back string
		if err := json.Unmarshal(appendJSONString(nil, s), &back); err != nil || back != s {
			t.Fatalf("%q -> %q (%v)", s, back, err)
		}
	})
}
