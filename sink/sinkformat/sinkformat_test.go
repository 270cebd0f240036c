package sinkformat_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

func message() outbox.Message {
	return outbox.Message{
		ID: uuid.MustParse("0190a6e2-7c3b-7d2e-9f10-3a5b6c7d8e9f"), AggregateType: "order", AggregateID: "o-1/ø",
		AggregateVersion: 1<<53 + 1, EventType: "order.paid", SchemaVersion: 3,
		Headers:     map[string]string{"tenant": "acme", "empty": "", "x-tab": "a\tb"},
		ContentType: "application/vnd.acme+json", Payload: []byte{0, 1, 0xff},
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		CreatedAt:   time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
}

// Every attribute and header survives encoding and decoding, in both formats, on every binding.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, b := range []sinkformat.Binding{sinkformat.Kafka, sinkformat.NATS, sinkformat.AMQP, sinkformat.HTTP, sinkformat.Redis, sinkformat.SQS} {
		for _, f := range []sinkformat.Format{sinkformat.Outbox, sinkformat.CloudEvents} {
			for _, version := range []int64{0, 7} {
				e, err := sinkformat.NewEncoder(b, f, "/orders-service")
				if err != nil {
					t.Fatal(err)
				}
				want := message()
				want.AggregateVersion = version
				hs, err := e.Headers(want)
				if err != nil {
					t.Fatalf("%s %s: %v", b.Name, f, err)
				}
				got, err := sinkformat.Decode(b, hs, want.Payload)
				if err != nil {
					t.Fatalf("%s %s: %v", b.Name, f, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s %s version %d:\n got %+v\nwant %+v", b.Name, f, version, got, want)
				}
			}
		}
	}
}

func names(hs []sinkformat.Header) map[string]string {
	m := make(map[string]string)
	for _, h := range hs {
		m[h.Name] = h.Value
	}
	return m
}

func TestCloudEventsAttributes(t *testing.T) {
	t.Parallel()
	e, err := sinkformat.NewEncoder(sinkformat.Kafka, sinkformat.CloudEvents, "")
	if err != nil {
		t.Fatal(err)
	}
	m := message()
	hs, err := e.Headers(m)
	if err != nil {
		t.Fatal(err)
	}
	got := names(hs)
	for name, want := range map[string]string{
		"ce_specversion": "1.0", "ce_id": m.ID.String(), "ce_source": sinkformat.DefaultSource, "ce_type": "order.paid",
		"ce_subject": "o-1/ø", "ce_time": "2026-01-02T03:04:05.000000006Z", "content-type": m.ContentType,
		"ce_aggregatetype": "order", "ce_schemaversion": "3", "traceparent": m.TraceParent,
	} {
		if got[name] != want {
			t.Errorf("header %s = %q, want %q", name, got[name], want)
		}
	}
	if _, ok := got["id"]; ok {
		t.Error("CloudEvents mode also wrote the outbox id header")
	}
}

// A header that could pose as an attribute or break a header line is refused, never rewritten.
func TestHeadersRefused(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*outbox.Message){
		"own header named id":            func(m *outbox.Message) { m.Headers = map[string]string{"ID": "x"} },
		"own header named content-type":  func(m *outbox.Message) { m.Headers = map[string]string{"Content-Type": "text/plain"} },
		"own header with the ce prefix":  func(m *outbox.Message) { m.Headers = map[string]string{"ce_id": "x"} },
		"own header with outbox- prefix": func(m *outbox.Message) { m.Headers = map[string]string{"outbox-event-type": "x"} },
		"CR LF in a value":               func(m *outbox.Message) { m.Headers = map[string]string{"a": "v\r\nid: evil"} },
		"NUL in a value":                 func(m *outbox.Message) { m.Headers = map[string]string{"a": "v\x00"} },
		"space in a name":                func(m *outbox.Message) { m.Headers = map[string]string{"a b": "v"} },
		"colon in a name":                func(m *outbox.Message) { m.Headers = map[string]string{"a:b": "v"} },
		"invalid UTF-8":                  func(m *outbox.Message) { m.Headers = map[string]string{"a": "\xff"} },
		"LF in the event type":           func(m *outbox.Message) { m.EventType = "paid\nid: evil" },
		"CR in the aggregate id":         func(m *outbox.Message) { m.AggregateID = "o-1\r" },
		"LF in the content type":         func(m *outbox.Message) { m.ContentType = "text/plain\n" },
	}
	for _, c := range []struct {
		b    sinkformat.Binding
		name string
	}{
		{sinkformat.NATS, "Nats-Msg-Id"},
		{sinkformat.NATS, "nats-expected-stream"},
		{sinkformat.AMQP, "CC"},
		{sinkformat.AMQP, "BCC"},
		{sinkformat.HTTP, "Host"},
		{sinkformat.HTTP, "Content-Length"},
		{sinkformat.HTTP, "Transfer-Encoding"},
		{sinkformat.HTTP, "webhook-signature"},
		{sinkformat.Redis, "payload"},
		{sinkformat.SQS, "AWS.TraceHeader"},
		{sinkformat.SQS, "amazon.x"},
	} {
		e, err := sinkformat.NewEncoder(c.b, sinkformat.Outbox, "")
		if err != nil {
			t.Fatal(err)
		}
		m := message()
		m.Headers = map[string]string{c.name: "x"}
		if _, err := e.Headers(m); !errors.Is(err, sinkformat.ErrHeader) {
			t.Errorf("%s header %s: %v, want an error wrapping ErrHeader", c.b.Name, c.name, err)
		}
	}
	for name, change := range cases {
		for _, f := range []sinkformat.Format{sinkformat.Outbox, sinkformat.CloudEvents} {
			e, err := sinkformat.NewEncoder(sinkformat.Kafka, f, "")
			if err != nil {
				t.Fatal(err)
			}
			m := message()
			change(&m)
			if hs, err := e.Headers(m); !errors.Is(err, sinkformat.ErrHeader) {
				t.Errorf("%s (%s): got %v, %v; want an error wrapping ErrHeader", name, f, hs, err)
			}
		}
	}
}

func TestNewEncoderValidates(t *testing.T) {
	t.Parallel()
	if _, err := sinkformat.NewEncoder(sinkformat.NATS, "avro", ""); err == nil || !strings.Contains(err.Error(), "Format") {
		t.Errorf("unknown format: %v, want an error naming Format", err)
	}
	if _, err := sinkformat.NewEncoder(sinkformat.NATS, sinkformat.CloudEvents, "a\nb"); err == nil || !strings.Contains(err.Error(), "Source") {
		t.Errorf("source with LF: %v, want an error naming Source", err)
	}
}

func TestDecodeRefusesBrokenHeaders(t *testing.T) {
	t.Parallel()
	for name, hs := range map[string][]sinkformat.Header{
		"no id":            {{"outbox-schema-version", "1"}},
		"bad id":           {{"id", "nope"}, {"outbox-schema-version", "1"}},
		"bad version":      {{"id", uuid.NewString()}, {"outbox-schema-version", "1"}, {"outbox-aggregate-version", "x"}},
		"bad specversion":  {{"ce_id", uuid.NewString()}, {"ce_specversion", "0.3"}, {"ce_schemaversion", "1"}},
		"no schemaversion": {{"id", uuid.NewString()}},
	} {
		if _, err := sinkformat.Decode(sinkformat.Kafka, hs, nil); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}
