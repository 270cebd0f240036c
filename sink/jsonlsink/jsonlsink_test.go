package jsonlsink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/jsonlsink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

var errDiskFull = errors.New("disk full")

// file is an in-memory file that refuses the lines of chosen messages, as a full
// disk would.
type file struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	refuse func(outbox.Message) bool
}

func (f *file) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		var r jsonlsink.Record
		if err := json.Unmarshal(p, &r); err != nil {
			return 0, fmt.Errorf("not one JSON object: %w", err)
		}
		if m, err := r.Message(); err != nil || f.refuse(m) {
			return 0, errDiskFull
		}
	}
	return f.buf.Write(p)
}

func (f *file) setRefuse(refuse func(outbox.Message) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
}

// messages decodes every line written so far, checking each is one JSON object.
func (f *file) messages() ([]outbox.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return decode(f.buf.Bytes())
}

// ids returns the "id" member of every line written so far, the line's message id.
func (f *file) ids(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for line := range bytes.Lines(f.buf.Bytes()) {
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, err
		}
		ids = append(ids, r.ID)
	}
	return ids, nil
}

// decode reads the records of b, which must be whole lines, each one JSON object.
func decode(b []byte) ([]outbox.Message, error) {
	var msgs []outbox.Message
	for n := 1; len(b) > 0; n++ {
		line, rest, ok := bytes.Cut(b, []byte("\n"))
		if !ok {
			return nil, fmt.Errorf("line %d does not end with a newline", n)
		}
		var r jsonlsink.Record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		m, err := r.Message()
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		msgs = append(msgs, m)
		b = rest
	}
	return msgs, nil
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(*testing.T) sinktest.Harness {
		f := &file{}
		return sinktest.Harness{
			Sink:     jsonlsink.New(f),
			Received: func(context.Context) ([]outbox.Message, error) { return f.messages() },
			FailWhen: f.setRefuse,
			// A file has no outage a test can bring back: write errors are transient
			// failures, which the relay's breaker reads as an outage when they span
			// aggregates. Outage is skipped.
			MessageIDs: f.ids,
		}
	}, sinktest.Features{ReformatsJSON: true})
}

func message() outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), Seq: 42, AggregateType: "order", AggregateID: "o-1", AggregateVersion: 3,
		EventType: "order.paid", SchemaVersion: 2, Topic: "orders", Headers: map[string]string{"tenant": "acme"},
		ContentType: outbox.ContentTypeJSON, Payload: []byte(`{"amount": 12}`),
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		CreatedAt:   time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Attempt: 2,
	}
}

// Every field, including those the conformance suite does not compare, survives.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	want := message()
	pretty := want
	pretty.Payload = []byte("{\n  \"amount\": 12\n}\n")
	if errs := jsonlsink.New(&buf).Publish(t.Context(), []outbox.Message{pretty}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("wrote %d lines, want 1:\n%s", n, buf.String())
	}
	got, err := decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want.Payload = []byte(`{"amount":12}`)
	if !reflect.DeepEqual(got[0], want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got[0], want)
	}
}

func TestPayloadEncoding(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		contentType, payload, encoding string
	}{
		{"application/json", `{"a":1}`, jsonlsink.EncodingJSON},
		{"application/cloudevents+json; charset=utf-8", `[1]`, jsonlsink.EncodingJSON},
		{"application/json", `not json`, jsonlsink.EncodingBase64},
		{"application/json", ``, jsonlsink.EncodingBase64},
		{"application/octet-stream", `{"a":1}`, jsonlsink.EncodingBase64},
	} {
		m := message()
		m.ContentType, m.Payload = c.contentType, []byte(c.payload)
		if r := jsonlsink.NewRecord(m); r.PayloadEncoding != c.encoding {
			t.Errorf("%s %q: payload_encoding %q, want %q", c.contentType, c.payload, r.PayloadEncoding, c.encoding)
		}
	}
}

func TestOpenAppendsAndClose(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	for range 2 {
		s, err := jsonlsink.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if errs := s.Publish(t.Context(), []outbox.Message{message()}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if errs := s.Publish(t.Context(), []outbox.Message{message()}); !errors.Is(errs[0], jsonlsink.ErrClosed) || !outbox.IsUnavailable(errs[0]) {
			t.Fatalf("Publish after Close: %v, want Unavailable wrapping ErrClosed", errs[0])
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decode(b); err != nil || len(got) != 2 {
		t.Fatalf("file holds %d messages (%v), want 2 appended:\n%s", len(got), err, b)
	}
	if _, err := jsonlsink.Open(filepath.Join(t.TempDir(), "missing", "x.jsonl")); err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

func TestWriteErrorStopsAggregate(t *testing.T) {
	t.Parallel()
	f := &file{}
	bad := message()
	f.setRefuse(func(m outbox.Message) bool { return m.ID == bad.ID })
	first, later, other := message(), message(), message()
	other.AggregateID = "o-2"
	errs := jsonlsink.New(f).Publish(t.Context(), []outbox.Message{first, bad, other, later})
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("first message or other aggregate failed: %v", errs)
	}
	if !errors.Is(errs[1], errDiskFull) || !strings.Contains(errs[1].Error(), bad.ID.String()) {
		t.Errorf("failed write: %v, want the write error naming the event", errs[1])
	}
	if !errors.Is(errs[3], outbox.ErrNotSent) {
		t.Errorf("later message of the aggregate: %v, want ErrNotSent", errs[3])
	}
}

// tearOnce writes half of its first line, then fails.
type tearOnce struct {
	bytes.Buffer
	torn bool
}

func (w *tearOnce) Write(p []byte) (int, error) {
	if !w.torn {
		w.torn = true
		n, _ := w.Buffer.Write(p[:len(p)/2])
		return n, errDiskFull
	}
	return w.Buffer.Write(p)
}

// A torn line costs only its own message: the next line starts on a line of its own.
func TestTornLine(t *testing.T) {
	t.Parallel()
	var w tearOnce
	s := jsonlsink.New(&w)
	first, second := message(), message()
	if errs := s.Publish(t.Context(), []outbox.Message{first}); !errors.Is(errs[0], errDiskFull) {
		t.Fatalf("torn write: %v, want the write's error", errs[0])
	}
	if errs := s.Publish(t.Context(), []outbox.Message{second}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	lines := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want the torn one and a whole one:\n%s", len(lines), w.String())
	}
	got, err := decode([]byte(lines[1] + "\n"))
	if err != nil || len(got) != 1 || got[0].ID != second.ID {
		t.Fatalf("second line = %q (%v), want the second message", lines[1], err)
	}
}
