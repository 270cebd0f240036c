package outboxotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/sink/memsink"
)

const secretPayload = `{"card": "4111-1111-1111-1111"}`

// TestOneTraceFromEnqueueToConsumer: a span around the business transaction, its
// traceparent written by Enqueue, a real relay publishing through the wrapped sink and
// the message consumed through inbox.Process with the wrapped handler make one trace:
// producer → publish (Producer) → process (Consumer) → the handler's own span. An event
// written without a traceparent starts a trace of its own at its publish span.
func TestOneTraceFromEnqueueToConsumer(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tp, rec := recorder(t)
	tracer := tp.Tracer("app")

	pctx, producer := tracer.Start(ctx, "place order")
	traced := outbox.Event{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.placed",
		Payload: []byte(secretPayload), Headers: map[string]string{"x-secret": "hunter2"},
	}
	outboxotel.Inject(pctx, &traced)
	if traced.TraceParent != outboxotel.TraceParent(pctx) || traced.TraceParent == "" {
		t.Fatalf("Inject set %q, want the producer's traceparent %q", traced.TraceParent, outboxotel.TraceParent(pctx))
	}
	untraced := outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-2", EventType: "order.placed", Payload: []byte(`{}`)}
	outboxotel.Inject(ctx, &untraced) // no span in ctx: nothing
	if untraced.TraceParent != "" {
		t.Fatalf("Inject without a span set %q", untraced.TraceParent)
	}
	enqueue(t, pool, traced, untraced)
	producer.End()
	var stored string
	if err := pool.QueryRow(ctx, `SELECT trace_parent FROM outbox.events WHERE id = $1`, traced.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != traced.TraceParent {
		t.Fatalf("trace_parent column %q, want %q", stored, traced.TraceParent)
	}

	mem := &memsink.Sink{}
	_, stop := runRelay(t, pool, outboxotel.NewSink(mem, &outboxotel.Config{TracerProvider: tp, System: "memory"}), fastConfig())
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := mem.WaitFor(wctx, 2); err != nil {
		t.Fatalf("relay delivered %d of 2: %v", mem.Count(), err)
	}
	stop()

	handler := outboxotel.Handler(func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		_, s := tracer.Start(ctx, "charge "+msg.AggregateID)
		defer s.End()
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	}, &outboxotel.HandlerConfig{TracerProvider: tp, Consumer: "billing", System: "memory"})
	for _, m := range mem.Messages() {
		res, err := inbox.Process(ctx, pool, "billing", m, handler)
		if err != nil || res.Outcome != inbox.Applied {
			t.Fatalf("process %s: %v %v", m.ID, res.Outcome, err)
		}
	}

	spans := rec.Ended()
	find := func(prefix string, id string) sdktrace.ReadOnlySpan {
		t.Helper()
		s := spansOf(spans, prefix, id)
		if len(s) != 1 {
			t.Fatalf("%d %q spans of event %s, want 1 (of %d spans)", len(s), prefix, id, len(spans))
		}
		return s[0]
	}
	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		s := named(spans, name)
		if len(s) != 1 {
			t.Fatalf("%d spans named %q, want 1", len(s), name)
		}
		return s[0]
	}

	publish := find("publish", traced.ID.String())
	process := find("process", traced.ID.String())
	charge := one("charge o-1")
	want := producer.SpanContext()
	for _, s := range []sdktrace.ReadOnlySpan{publish, process, charge} {
		if s.SpanContext().TraceID() != want.TraceID() {
			t.Errorf("span %q is in trace %s, want the producer's %s", s.Name(), s.SpanContext().TraceID(), want.TraceID())
		}
	}
	checkChild(t, publish, want, trace.SpanKindProducer, true)
	checkChild(t, process, publish.SpanContext(), trace.SpanKindConsumer, true)
	checkChild(t, charge, process.SpanContext(), trace.SpanKindInternal, false)
	if publish.Name() != "publish order.placed" || process.Name() != "process order.placed" {
		t.Errorf("span names %q, %q", publish.Name(), process.Name())
	}
	for key, want := range map[string]string{
		"messaging.system": "memory", "messaging.operation.type": "send", "messaging.operation.name": "publish",
		"outbox.event.type": "order.placed", "outbox.aggregate.type": "order", "outbox.aggregate.id": "o-1",
	} {
		if v, _ := attr(publish, attributeKey(key)); v.String() != want {
			t.Errorf("publish span %s = %q, want %q", key, v.String(), want)
		}
	}
	if v, _ := attr(publish, outboxotel.AttrAttempt); v.AsInt64() != 1 {
		t.Errorf("publish span outbox.attempt = %v, want 1", v.String())
	}
	if v, _ := attr(process, "messaging.consumer.group.name"); v.AsString() != "billing" {
		t.Errorf("process span consumer %q, want billing", v.AsString())
	}
	noPayload(t, spans)

	// The event without a traceparent: its publish span is a root, and its consumer
	// still follows it.
	publish2 := find("publish", untraced.ID.String())
	process2 := find("process", untraced.ID.String())
	if publish2.Parent().IsValid() {
		t.Errorf("publish span of an untraced event has parent %v, want a root", publish2.Parent())
	}
	if publish2.SpanContext().TraceID() == want.TraceID() {
		t.Error("the untraced event's publish span is in the producer's trace")
	}
	checkChild(t, process2, publish2.SpanContext(), trace.SpanKindConsumer, true)
}

// checkChild checks s is of kind and a child of parent (remote: across a process).
func checkChild(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.SpanContext, kind trace.SpanKind, remote bool) {
	t.Helper()
	if s.SpanKind() != kind {
		t.Errorf("span %q is of kind %v, want %v", s.Name(), s.SpanKind(), kind)
	}
	p := s.Parent()
	if p.TraceID() != parent.TraceID() || p.SpanID() != parent.SpanID() {
		t.Errorf("span %q has parent %s/%s, want %s/%s", s.Name(), p.TraceID(), p.SpanID(), parent.TraceID(), parent.SpanID())
	}
	if p.IsRemote() != remote {
		t.Errorf("span %q: parent remote %v, want %v", s.Name(), p.IsRemote(), remote)
	}
}

// noPayload fails when any span holds the payload or a header value.
func noPayload(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			v := kv.Value.String()
			if strings.Contains(v, "4111") || strings.Contains(v, "hunter2") || strings.Contains(string(kv.Key), "x-secret") {
				t.Errorf("span %q attribute %s = %q holds the payload or a header", s.Name(), kv.Key, v)
			}
		}
	}
}

// TestFailedPublishSetsErrorStatus: a real relay over a sink that fails an event's first
// attempt; that attempt's publish span is an Error (transient), the message after it
// in the call is not_sent, and the second attempt is an Ok child of the same producer
// span with outbox.attempt 2. A permanent refusal is error.type permanent.
func TestFailedPublishSetsErrorStatus(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tp, rec := recorder(t)
	pctx, producer := tp.Tracer("app").Start(ctx, "write")
	first := outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.placed", Payload: []byte(`{}`)}
	second := outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.paid", Payload: []byte(`{}`)}
	refused := outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-2", EventType: "order.placed", Payload: []byte(`{}`)}
	for _, e := range []*outbox.Event{&first, &second, &refused} {
		outboxotel.Inject(pctx, e)
	}
	enqueue(t, pool, first, second, refused)
	producer.End()

	mem := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		switch {
		case m.ID == refused.ID:
			return outbox.Permanent(errors.New("schema refused"))
		case m.ID == first.ID && m.Attempt == 1:
			return errors.New("broker hiccup")
		}
		return nil
	}}
	_, stop := runRelay(t, pool, outboxotel.NewSink(mem, &outboxotel.Config{TracerProvider: tp}), fastConfig())
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := mem.WaitFor(wctx, 2); err != nil {
		t.Fatalf("relay delivered %d of 2: %v", mem.Count(), err)
	}
	stop()

	spans := rec.Ended()
	attempts := spansOf(spans, "publish", first.ID.String())
	if len(attempts) < 2 {
		t.Fatalf("%d publish spans of the failing event, want 2", len(attempts))
	}
	failed, ok := attempts[0], attempts[len(attempts)-1]
	if failed.Status().Code != codes.Error || !strings.Contains(failed.Status().Description, "broker hiccup") {
		t.Errorf("failed attempt's status %+v, want Error with the sink's error", failed.Status())
	}
	if v, _ := attr(failed, "error.type"); v.AsString() != outboxotel.ErrorTypeTransient {
		t.Errorf("failed attempt's error.type %q, want %q", v.AsString(), outboxotel.ErrorTypeTransient)
	}
	if ok.Status().Code == codes.Error {
		t.Errorf("successful attempt's status %+v", ok.Status())
	}
	if v, _ := attr(ok, outboxotel.AttrAttempt); v.AsInt64() != 2 {
		t.Errorf("successful attempt's outbox.attempt %d, want 2", v.AsInt64())
	}
	for _, s := range attempts {
		checkChild(t, s, producer.SpanContext(), trace.SpanKindProducer, true)
	}
	notSent := spansOf(spans, "publish", second.ID.String())
	if len(notSent) == 0 {
		t.Fatal("no publish span of the event behind the failure")
	}
	if v, _ := attr(notSent[0], "error.type"); v.AsString() != outboxotel.ErrorTypeNotSent || notSent[0].Status().Code != codes.Error {
		t.Errorf("the event behind the failure: error.type %q status %v, want %q Error", v.AsString(), notSent[0].Status().Code, outboxotel.ErrorTypeNotSent)
	}
	perm := spansOf(spans, "publish", refused.ID.String())
	if len(perm) != 1 {
		t.Fatalf("%d publish spans of the refused event, want 1", len(perm))
	}
	if v, _ := attr(perm[0], "error.type"); v.AsString() != outboxotel.ErrorTypePermanent || perm[0].Status().Code != codes.Error {
		t.Errorf("refused event: error.type %q status %v, want permanent Error", v.AsString(), perm[0].Status().Code)
	}
}
