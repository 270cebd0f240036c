// Package jsonlsink is an [outbox.Sink] for debugging: it writes each message as one
// JSON object per line ([Record]) to an io.Writer, such as os.Stdout or a file.
//
//	sink := jsonlsink.New(os.Stdout)
//
// A message counts as delivered once its line was written: the sink does not sync
// files, and JSON payloads are written compacted (insignificant whitespace removed).
package jsonlsink

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// ErrClosed is the error, marked [outbox.Unavailable], of messages published after
// [Sink.Close].
var ErrClosed = errors.New("sink is closed")

// Payload encodings of a [Record].
const (
	// EncodingJSON: Record.Payload is the payload itself, a JSON value.
	EncodingJSON = "json"
	// EncodingBase64: Record.Payload is a JSON string holding the payload's bytes in
	// standard base64.
	EncodingBase64 = "base64"
)

// Record is one line of the sink's output.
type Record struct {
	ID               uuid.UUID         `json:"id"`
	Seq              int64             `json:"seq"`
	AggregateType    string            `json:"aggregate_type"`
	AggregateID      string            `json:"aggregate_id"`
	AggregateVersion int64             `json:"aggregate_version,omitempty"`
	EventType        string            `json:"event_type"`
	SchemaVersion    int               `json:"schema_version"`
	Topic            string            `json:"topic,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	ContentType      string            `json:"content_type"`
	// PayloadEncoding says how Payload holds the message's payload: [EncodingJSON]
	// for a valid JSON payload of a JSON content type ("application/json", "…+json"),
	// [EncodingBase64] for every other payload.
	PayloadEncoding string          `json:"payload_encoding"`
	Payload         json.RawMessage `json:"payload"`
	TraceParent     string          `json:"trace_parent,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	Attempt         int             `json:"attempt"`
}

// NewRecord returns the record of m.
func NewRecord(m outbox.Message) Record {
	r := Record{
		ID: m.ID, Seq: m.Seq, AggregateType: m.AggregateType, AggregateID: m.AggregateID,
		AggregateVersion: m.AggregateVersion, EventType: m.EventType, SchemaVersion: m.SchemaVersion,
		Topic: m.Topic, Headers: m.Headers, ContentType: m.ContentType, TraceParent: m.TraceParent,
		CreatedAt: m.CreatedAt, Attempt: m.Attempt,
		PayloadEncoding: EncodingJSON, Payload: m.Payload,
	}
	if !isJSON(m.ContentType) || !json.Valid(m.Payload) {
		// A JSON string never fails to marshal.
		b, _ := json.Marshal(base64.StdEncoding.EncodeToString(m.Payload))
		r.PayloadEncoding, r.Payload = EncodingBase64, b
	}
	return r
}

// Message returns the message r records; a JSON payload comes back as written
// (compacted).
func (r Record) Message() (outbox.Message, error) {
	m := outbox.Message{
		ID: r.ID, Seq: r.Seq, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		AggregateVersion: r.AggregateVersion, EventType: r.EventType, SchemaVersion: r.SchemaVersion,
		Topic: r.Topic, Headers: r.Headers, ContentType: r.ContentType, TraceParent: r.TraceParent,
		CreatedAt: r.CreatedAt, Attempt: r.Attempt,
	}
	switch r.PayloadEncoding {
	case EncodingJSON:
		m.Payload = bytes.Clone(r.Payload)
	case EncodingBase64:
		var s string
		if err := json.Unmarshal(r.Payload, &s); err != nil {
			return outbox.Message{}, fmt.Errorf("event %s: base64 payload: %w", r.ID, err)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return outbox.Message{}, fmt.Errorf("event %s: base64 payload: %w", r.ID, err)
		}
		m.Payload = b
	default:
		return outbox.Message{}, fmt.Errorf("event %s: unknown payload_encoding %q", r.ID, r.PayloadEncoding)
	}
	return m, nil
}

// isJSON reports whether ct is a JSON content type, as Enqueue decides it.
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == outbox.ContentTypeJSON || strings.HasSuffix(mt, "+json")
}

// Sink writes messages as JSON lines. It is safe for concurrent use: each line is
// written whole, by one Write call, under a mutex.
type Sink struct {
	mu     sync.Mutex
	w      io.Writer
	closer io.Closer // the file Open opened; nil for New
	closed bool
	torn   bool // a failed write left part of a line behind
}

// New returns a sink writing to w. [Sink.Close] does not close w.
func New(w io.Writer) *Sink {
	return &Sink{w: w}
}

// Open returns a sink appending to the file at path, created (mode 0600) if missing.
// Close the sink to close the file.
func Open(path string) (*Sink, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600) //nolint:gosec // G304: the path is the caller's choice
	if err != nil {
		return nil, fmt.Errorf("open jsonl sink: %w", err)
	}
	return &Sink{w: f, closer: f}, nil
}

// Close stops the sink, and closes the file when the sink came from [Open]. Messages
// published afterwards fail with [ErrClosed].
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.closer != nil {
		if err := s.closer.Close(); err != nil {
			return fmt.Errorf("close jsonl sink: %w", err)
		}
	}
	return nil
}

// Publish writes one line per message, in order, and returns one result per message:
// nil when the line was written; the write's or ctx's error; or [outbox.ErrNotSent]
// after an earlier message of the same aggregate failed. When a failed write left part
// of its line behind, the next line starts on a new line: only the torn line is lost.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	failed := make(map[[2]string]bool)
	var line bytes.Buffer
	for i, m := range msgs {
		agg := [2]string{m.AggregateType, m.AggregateID}
		if failed[agg] {
			errs[i] = outbox.ErrNotSent
			continue
		}
		if err := s.write(ctx, &line, m); err != nil {
			errs[i] = fmt.Errorf("write event %s: %w", m.ID, err)
			failed[agg] = true
		}
	}
	return errs
}

func (s *Sink) write(ctx context.Context, line *bytes.Buffer, m outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	line.Reset()
	line.WriteByte('\n')         // written only after a torn line
	enc := json.NewEncoder(line) // Encode ends the line with '\n'
	enc.SetEscapeHTML(false)
	if err := enc.Encode(NewRecord(m)); err != nil {
		return outbox.Permanent(err) // e.g. a CreatedAt beyond year 9999
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return outbox.Unavailable(ErrClosed)
	}
	b := line.Bytes()
	if !s.torn {
		b = b[1:]
	}
	n, err := s.w.Write(b)
	if err != nil {
		if n > 0 {
			s.torn = true
		}
		// A plain (transient) error: when the writer fails for every message (a full
		// disk), failures across many aggregates open the relay's breaker anyway.
		return err
	}
	s.torn = false
	return nil
}
