// Package emitted is the format of the events a table-less writer ([outbox.Writer.Emit])
// puts in the WAL with pg_logical_emit_message, shared by the writer and the CDC reader
// (package cdc) that decodes them: the message prefix of a schema, and the content — a
// JSON array of rows, the shape enqueue.sql reads with json_to_recordset (the writer's
// appendRow writes both).
package emitted

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ContentTypeJSON is the default content type, and the one JSON payloads are stored as.
const ContentTypeJSON = "application/json"

// Prefix is the logical decoding message prefix of the events of schema (unquoted).
func Prefix(schema string) string { return "outbox:" + schema }

// DefaultSlot is the default replication slot (and publication) of the CDC reader of
// schema (unquoted).
func DefaultSlot(schema string) string { return "outbox_cdc_" + schema }

// IsJSON reports whether payloads of content type ct are JSON: stored in the events
// table's payload column (of type json), rather than payload_bytes.
func IsJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == ContentTypeJSON || strings.HasSuffix(mt, "+json")
}

// Row is one event of a message's content, as the writer encoded it.
type Row struct {
	ID               uuid.UUID         `json:"id"`
	AggregateType    string            `json:"aggregate_type"`
	AggregateID      string            `json:"aggregate_id"`
	AggregateVersion int64             `json:"aggregate_version"`
	EventType        string            `json:"event_type"`
	SchemaVersion    int               `json:"schema_version"`
	Topic            string            `json:"topic"`
	Headers          map[string]string `json:"headers"`
	ContentType      string            `json:"content_type"`
	// Payload is a JSON payload as written; PayloadB64 any other payload, in base64.
	Payload     json.RawMessage `json:"payload"`
	PayloadB64  []byte          `json:"payload_b64"` // standard base64, as encoding/json reads []byte
	TraceParent string          `json:"trace_parent"`
	AvailableAt time.Time       `json:"available_at"`
}

// PayloadBytes returns the row's payload: the JSON text as written, or the bytes.
func (r *Row) PayloadBytes() []byte {
	if len(r.Payload) > 0 {
		return r.Payload
	}
	return r.PayloadB64
}

// Decode reads a message's content. It refuses content that is not an array of rows
// naming an id, an aggregate and an event type, with a schema version of at least 1 and
// a payload of the kind the content type says (what the events table's CHECK and json
// column would refuse): such a message was not written by the Writer.
func Decode(content []byte) ([]Row, error) {
	var rows []Row
	dec := json.NewDecoder(bytes.NewReader(content))
	if err := dec.Decode(&rows); err != nil {
		return nil, fmt.Errorf("emitted events: %w", err)
	}
	for i := range rows {
		r := &rows[i]
		switch {
		case r.ID == uuid.Nil:
			return nil, fmt.Errorf("emitted events: row %d: no id", i)
		case r.AggregateType == "" || r.AggregateID == "" || r.EventType == "":
			return nil, fmt.Errorf("emitted events: row %d (%s): empty aggregate type, aggregate id or event type", i, r.ID)
		case r.SchemaVersion < 1:
			return nil, fmt.Errorf("emitted events: row %d (%s): schema version %d", i, r.ID, r.SchemaVersion)
		case r.AggregateVersion < 0:
			return nil, fmt.Errorf("emitted events: row %d (%s): aggregate version %d", i, r.ID, r.AggregateVersion)
		}
		if hasNUL(r) {
			return nil, fmt.Errorf("emitted events: row %d (%s): a NUL character, which no text column holds", i, r.ID)
		}
		if r.ContentType == "" {
			r.ContentType = ContentTypeJSON
		}
		if len(r.Payload) > 0 && !IsJSON(r.ContentType) || len(r.PayloadB64) > 0 && IsJSON(r.ContentType) {
			return nil, fmt.Errorf("emitted events: row %d (%s): payload kind does not match content type %q", i, r.ID, r.ContentType)
		}
		if bytes.Equal(r.Payload, []byte("null")) {
			r.Payload = nil
		}
	}
	return rows, nil
}

// hasNUL reports whether a text field of r holds a NUL character (JSON can spell it,
// PostgreSQL's text and jsonb cannot store it: writing such a row would fail every time).
func hasNUL(r *Row) bool {
	for _, v := range []string{r.AggregateType, r.AggregateID, r.EventType, r.Topic, r.ContentType, r.TraceParent} {
		if strings.IndexByte(v, 0) >= 0 {
			return true
		}
	}
	for k, v := range r.Headers {
		if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return true
		}
	}
	return false
}
