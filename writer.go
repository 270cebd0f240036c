package outbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/internal/sqlq"
)

// DefaultMaxPayloadBytes is the default WriterConfig.MaxPayloadBytes: 900 KiB, below the
// 1 MiB that NATS and Kafka accept by default once headers are added.
const DefaultMaxPayloadBytes = 900 << 10

// WriterConfig configures a [Writer]. The zero value (or nil) means the defaults.
type WriterConfig struct {
	// Schema is the PostgreSQL schema holding the outbox tables, as created by
	// outboxmigrate. Default "outbox".
	Schema string
	// MaxPayloadBytes refuses larger payloads at Enqueue. Default [DefaultMaxPayloadBytes].
	MaxPayloadBytes int
	// DisableAggregateLock turns off the transaction-scoped advisory lock that Enqueue
	// takes per aggregate. With the lock (the default), two transactions writing one
	// aggregate commit in seq order, so the relay publishes them in commit order.
	// Turn it off only when the caller already serialises writers of an aggregate,
	// e.g. by locking the aggregate's business row (SELECT … FOR UPDATE) first.
	DisableAggregateLock bool
}

// Writer enqueues events into the caller's transaction. It is safe for concurrent use.
type Writer struct {
	maxPayload   int
	lock         bool
	insertSQL    string
	conflictsSQL string
}

// NewWriter returns a Writer for cfg; nil means the defaults.
func NewWriter(cfg *WriterConfig) (*Writer, error) {
	if cfg == nil {
		cfg = &WriterConfig{}
	}
	schema := sqlq.DefaultSchema
	if cfg.Schema != "" {
		schema = cfg.Schema
	}
	quoted, err := sqlq.QuoteSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("WriterConfig.Schema: %w", err)
	}
	maxPayload := DefaultMaxPayloadBytes
	switch {
	case cfg.MaxPayloadBytes < 0:
		return nil, fmt.Errorf("WriterConfig.MaxPayloadBytes must not be negative, got %d", cfg.MaxPayloadBytes)
	case cfg.MaxPayloadBytes > 0:
		maxPayload = cfg.MaxPayloadBytes
	}
	return &Writer{
		maxPayload:   maxPayload,
		lock:         !cfg.DisableAggregateLock,
		insertSQL:    sqlq.Query("enqueue", quoted),
		conflictsSQL: sqlq.Query("enqueue_conflicts", quoted),
	}, nil
}

var defaultWriter = func() *Writer {
	w, err := NewWriter(nil)
	if err != nil {
		panic(err)
	}
	return w
}()

// Enqueue writes events into tx with the default Writer (schema "outbox"). See
// [Writer.Enqueue].
func Enqueue(ctx context.Context, tx Tx, events ...Event) error {
	return defaultWriter.Enqueue(ctx, tx, events...)
}

// row is one event as the enqueue statement reads it (json_to_recordset).
type row struct {
	Ord              int               `json:"ord"`
	ID               uuid.UUID         `json:"id"`
	AggregateType    string            `json:"aggregate_type"`
	AggregateID      string            `json:"aggregate_id"`
	AggregateVersion int64             `json:"aggregate_version,omitempty"`
	EventType        string            `json:"event_type"`
	SchemaVersion    int               `json:"schema_version"`
	Topic            string            `json:"topic,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	ContentType      string            `json:"content_type"`
	Payload          json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64    string            `json:"payload_b64,omitempty"`
	TraceParent      string            `json:"trace_parent,omitempty"`
	AvailableAt      *time.Time        `json:"available_at,omitempty"`
}

// Enqueue writes events into the caller's transaction tx, all in one statement and one
// round trip. They are published after tx commits, and never if it rolls back.
//
// Every event is validated first; an invalid one is refused with a [*ValidationError]
// naming the field, and nothing is written. An event whose ID or aggregate version
// already exists is skipped and reported in a [*ConflictError] (errors.Is with
// [ErrDuplicateID] or [ErrVersionConflict]) while the others are written. In both
// cases tx stays usable. Enqueue never begins, commits or rolls back tx.
func (w *Writer) Enqueue(ctx context.Context, tx Tx, events ...Event) error {
	if tx == nil {
		return errNilTx
	}
	if len(events) == 0 {
		return nil
	}
	rows := make([]row, len(events))
	seen := make(map[uuid.UUID]int, len(events))
	type versionKey struct {
		aggregateType, aggregateID string
		version                    int64
	}
	seenVersions := map[versionKey]int{}
	for i, e := range events {
		e, err := w.validate(i, e)
		if err != nil {
			return err
		}
		if j, dup := seen[e.ID]; dup {
			return &ValidationError{Index: i, Field: "ID", Reason: fmt.Sprintf("repeats the id of event %d in this call", j)}
		}
		seen[e.ID] = i
		if e.AggregateVersion > 0 {
			k := versionKey{e.AggregateType, e.AggregateID, e.AggregateVersion}
			if j, dup := seenVersions[k]; dup {
				return &ValidationError{Index: i, Field: "AggregateVersion", Reason: fmt.Sprintf("repeats the aggregate version of event %d in this call", j)}
			}
			seenVersions[k] = i
		}
		r := row{
			Ord: i, ID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
			AggregateVersion: e.AggregateVersion, EventType: e.EventType, SchemaVersion: e.SchemaVersion,
			Topic: e.Topic, Headers: e.Headers, ContentType: e.ContentType, TraceParent: e.TraceParent,
		}
		switch {
		case len(e.Payload) == 0:
		case isJSONContentType(e.ContentType):
			r.Payload = e.Payload
		default:
			r.PayloadBase64 = base64.StdEncoding.EncodeToString(e.Payload)
		}
		if !e.AvailableAt.IsZero() {
			at := e.AvailableAt
			r.AvailableAt = &at
		}
		rows[i] = r
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rows); err != nil {
		return fmt.Errorf("enqueue: encode events: %w", err)
	}
	inserted, err := tx.queryStrings(ctx, w.insertSQL, buf.String(), w.lock)
	if err != nil {
		return fmt.Errorf("enqueue: insert %d events: %w", len(events), err)
	}
	if len(inserted) == len(events) {
		return nil
	}
	return w.conflicts(ctx, tx, rows, inserted)
}

// conflicts explains which events ON CONFLICT DO NOTHING skipped, and why.
func (w *Writer) conflicts(ctx context.Context, tx Tx, rows []row, inserted []string) error {
	done := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		done[id] = true
	}
	var skipped []string
	for _, r := range rows {
		if id := r.ID.String(); !done[id] {
			skipped = append(skipped, id)
		}
	}
	arg, err := json.Marshal(skipped)
	if err != nil {
		return fmt.Errorf("enqueue: encode skipped ids: %w", err)
	}
	existing, err := tx.queryStrings(ctx, w.conflictsSQL, string(arg))
	if err != nil {
		return fmt.Errorf("enqueue: look up conflicting events: %w", err)
	}
	dup := make(map[string]bool, len(existing))
	for _, id := range existing {
		dup[id] = true
	}
	cerr := &ConflictError{}
	for _, id := range skipped {
		u := uuid.MustParse(id)
		if dup[id] {
			cerr.DuplicateIDs = append(cerr.DuplicateIDs, u)
		} else {
			cerr.VersionConflicts = append(cerr.VersionConflicts, u)
		}
	}
	return cerr
}
