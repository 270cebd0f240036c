package outboxotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/sink/memsink"
)

// ctxSink records the slices it was given (not copies) and the span context of each
// call's ctx, and fails the messages fail says.
type ctxSink struct {
	mu    sync.Mutex
	calls [][]outbox.Message
	spans []trace.SpanContext
	fail  func(i int, m outbox.Message) error
}

func (c *ctxSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, msgs)
	c.spans = append(c.spans, trace.SpanContextFromContext(ctx))
	errs := make([]error, len(msgs))
	if c.fail != nil {
		for i, m := range msgs {
			errs[i] = c.fail(i, m)
		}
	}
	return errs
}

// producers returns n traceparents of ended producer spans of tp, of n traces.
func producers(t *testing.T, tp trace.TracerProvider, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		ctx, s := tp.Tracer("app").Start(context.Background(), "write")
		s.End()
		out[i] = outboxotel.TraceParent(ctx)
	}
	return out
}

// unsampled returns tp with its sampled flag cleared.
func unsampled(tp string) string { return strings.TrimSuffix(tp, "-01") + "-00" }

// linkIDs returns the span ids s links to, in order.
func linkIDs(s sdktrace.ReadOnlySpan) []trace.SpanID {
	var out []trace.SpanID
	for _, l := range s.Links() {
		out = append(out, l.SpanContext.SpanID())
	}
	return out
}

func spanIDOf(t *testing.T, tp string) trace.SpanID {
	t.Helper()
	sc := trace.SpanContextFromContext(outboxotel.ContextFromMessage(context.Background(), outbox.Message{TraceParent: tp}))
	if !sc.IsValid() {
		t.Fatalf("traceparent %q does not parse", tp)
	}
	return sc.SpanID()
}

// TestSpanPerCallRecordsOneSendSpan: a call of messages from three producers (one of
// them not sampled, one with two messages), and one without a traceparent, records one
// Producer span "send <event type>", a root, with the batch's message count and a link
// to each producer span — sampled ones first, one for the two messages of one — and the
// sink behind gets the caller's very slice, traceparents as the producers wrote them,
// with ctx carrying the send span.
func TestSpanPerCallRecordsOneSendSpan(t *testing.T) {
	tp, rec := recorder(t)
	p := producers(t, tp, 3)
	msgs := messages(5, "")
	msgs[0].TraceParent = unsampled(p[0])
	msgs[1].TraceParent = p[1]
	msgs[2].TraceParent = p[1]
	msgs[3].TraceParent = p[2]
	before := make([]string, len(msgs))
	for i := range msgs {
		before[i] = msgs[i].TraceParent
	}
	next := &ctxSink{}
	s := outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, System: "kafka", Spans: outboxotel.SpanPerCall})
	if errs := s.Publish(context.Background(), msgs); len(errs) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(errs), len(msgs))
	}

	sends := named(rec.Ended(), "send order.placed")
	if n := len(rec.Ended()) - len(p); n != 1 || len(sends) != 1 {
		t.Fatalf("%d spans ended beside the producers' (%d named %q), want one send span", n, len(sends), "send order.placed")
	}
	send := sends[0]
	if send.SpanKind() != trace.SpanKindProducer || send.Parent().IsValid() {
		t.Errorf("send span of kind %v with parent %v, want a Producer root", send.SpanKind(), send.Parent())
	}
	for key, want := range map[string]string{
		"messaging.system": "kafka", "messaging.operation.type": "send", "messaging.operation.name": "send",
	} {
		if v, _ := attr(send, attributeKey(key)); v.AsString() != want {
			t.Errorf("send span %s = %q, want %q", key, v.AsString(), want)
		}
	}
	if v, _ := attr(send, "messaging.batch.message_count"); v.AsInt64() != int64(len(msgs)) {
		t.Errorf("messaging.batch.message_count %d, want %d", v.AsInt64(), len(msgs))
	}
	if _, ok := attr(send, "messaging.message.id"); ok {
		t.Error("the send span has a messaging.message.id")
	}
	if _, ok := attr(send, outboxotel.AttrBatchUnlinkedCount); ok || send.Status().Code == codes.Error {
		t.Errorf("status %+v, unlinked %v: want neither", send.Status(), ok)
	}
	want := []trace.SpanID{spanIDOf(t, p[1]), spanIDOf(t, p[2]), spanIDOf(t, p[0])}
	if got := linkIDs(send); !equalIDs(got, want) {
		t.Errorf("links to %v, want %v (sampled producers first, one a producer)", got, want)
	}

	if len(next.calls) != 1 || &next.calls[0][0] != &msgs[0] {
		t.Fatal("the sink behind did not get the caller's slice")
	}
	for i, m := range next.calls[0] {
		if m.TraceParent != before[i] {
			t.Errorf("message %d went on with traceparent %q, want the producer's %q", i, m.TraceParent, before[i])
		}
	}
	if got := next.spans[0]; got.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("the sink's ctx carries span %s, want the send span %s", got.SpanID(), send.SpanContext().SpanID())
	}

	// With a span in ctx, the send span is its child.
	cctx, caller := tp.Tracer("relay").Start(context.Background(), "batch")
	s.Publish(cctx, msgs[:1])
	caller.End()
	child := named(rec.Ended(), "send order.placed")[1]
	checkChild(t, child, caller.SpanContext(), trace.SpanKindProducer, false)
	if v, _ := attr(child, "messaging.batch.message_count"); v.AsInt64() != 1 {
		t.Errorf("a call of one message: messaging.batch.message_count %d, want 1", v.AsInt64())
	}
}

func equalIDs(a, b []trace.SpanID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSpanPerCallNames: the send span is named after the messages' destination when
// they share one (and records it), after their event type when they share that and
// have none, and "send" alone otherwise.
func TestSpanPerCallNames(t *testing.T) {
	tp, rec := recorder(t)
	cases := []struct {
		name, want, dest string
		edit             func(msgs []outbox.Message)
	}{
		{"one topic", "send orders", "orders", func(msgs []outbox.Message) {
			for i := range msgs {
				msgs[i].Topic = "orders"
				msgs[i].EventType = "t" + string(rune('a'+i))
			}
		}},
		{"one event type", "send order.placed", "", func([]outbox.Message) {}},
		{"different topics", "send", "", func(msgs []outbox.Message) { msgs[1].Topic = "payments" }},
		{"different types", "send", "", func(msgs []outbox.Message) { msgs[2].EventType = "order.paid" }},
	}
	s := outboxotel.NewSink(&ctxSink{}, &outboxotel.Config{TracerProvider: tp, Spans: outboxotel.SpanPerCall})
	for _, c := range cases {
		msgs := messages(3, "")
		c.edit(msgs)
		s.Publish(context.Background(), msgs)
		ended := rec.Ended()
		got := ended[len(ended)-1]
		if got.Name() != c.want {
			t.Errorf("%s: span %q, want %q", c.name, got.Name(), c.want)
		}
		if v, _ := attr(got, "messaging.destination.name"); v.AsString() != c.dest {
			t.Errorf("%s: messaging.destination.name %q, want %q", c.name, v.AsString(), c.dest)
		}
	}
}

// TestSpanPerCallFailures: failed messages set the send span's status to Error with how
// many failed and the error.type of the first; the results go back as they are.
func TestSpanPerCallFailures(t *testing.T) {
	tp, rec := recorder(t)
	hiccup := errors.New("broker hiccup")
	next := &ctxSink{fail: func(i int, m outbox.Message) error {
		switch i {
		case 1:
			return hiccup
		case 2:
			return outbox.ErrNotSent
		case 3:
			return outbox.Permanent(errors.New("schema refused"))
		}
		return nil
	}}
	s := outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, Spans: outboxotel.SpanPerCall})
	errs := s.Publish(context.Background(), messages(5, ""))
	if errs[0] != nil || !errors.Is(errs[1], hiccup) || !errors.Is(errs[2], outbox.ErrNotSent) || !outbox.IsPermanent(errs[3]) || errs[4] != nil {
		t.Fatalf("results %v, want the sink's", errs)
	}
	send := rec.Ended()[0]
	if st := send.Status(); st.Code != codes.Error || !strings.Contains(st.Description, "3 of 5") || !strings.Contains(st.Description, "broker hiccup") {
		t.Errorf("status %+v, want Error with 3 of 5 and the first error", st)
	}
	if v, _ := attr(send, "error.type"); v.AsString() != outboxotel.ErrorTypeTransient {
		t.Errorf("error.type %q, want the first failure's %q", v.AsString(), outboxotel.ErrorTypeTransient)
	}
	if v, _ := attr(send, outboxotel.AttrBatchFailedCount); v.AsInt64() != 3 {
		t.Errorf("%s = %d, want 3", outboxotel.AttrBatchFailedCount, v.AsInt64())
	}
}

// TestSpanPerCallMaxLinks: past MaxLinks the messages' producers get no link and are
// counted; sampled producers are linked first; a negative MaxLinks links none.
func TestSpanPerCallMaxLinks(t *testing.T) {
	tp, rec := recorder(t)
	p := producers(t, tp, 5)
	msgs := messages(5, "")
	for i := range msgs {
		msgs[i].TraceParent = p[i]
	}
	msgs[0].TraceParent = unsampled(p[0])
	outboxotel.NewSink(&ctxSink{}, &outboxotel.Config{TracerProvider: tp, Spans: outboxotel.SpanPerCall, MaxLinks: 3}).Publish(context.Background(), msgs)
	send := named(rec.Ended(), "send order.placed")[0]
	if got, want := linkIDs(send), []trace.SpanID{spanIDOf(t, p[1]), spanIDOf(t, p[2]), spanIDOf(t, p[3])}; !equalIDs(got, want) {
		t.Errorf("links to %v, want the first three sampled producers %v", got, want)
	}
	if v, _ := attr(send, outboxotel.AttrBatchUnlinkedCount); v.AsInt64() != 2 {
		t.Errorf("%s = %d, want 2", outboxotel.AttrBatchUnlinkedCount, v.AsInt64())
	}

	outboxotel.NewSink(&ctxSink{}, &outboxotel.Config{TracerProvider: tp, Spans: outboxotel.SpanPerCall, MaxLinks: -1}).Publish(context.Background(), msgs)
	none := named(rec.Ended(), "send order.placed")[1]
	if len(none.Links()) != 0 {
		t.Errorf("MaxLinks -1: %d links", len(none.Links()))
	}
	if v, _ := attr(none, outboxotel.AttrBatchUnlinkedCount); v.AsInt64() != 5 {
		t.Errorf("MaxLinks -1: %s = %d, want 5", outboxotel.AttrBatchUnlinkedCount, v.AsInt64())
	}
}

// TestSpanPerCallNotRecording: with a no-op provider, or a sampler that records no
// root, nothing is recorded and the sink behind gets the caller's slice and ctx.
func TestSpanPerCallNotRecording(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	for _, tp := range []trace.TracerProvider{noop.NewTracerProvider(), never} {
		msgs := messages(4, "")
		next := &ctxSink{}
		outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, Spans: outboxotel.SpanPerCall}).Publish(context.Background(), msgs)
		if len(next.calls) != 1 || &next.calls[0][0] != &msgs[0] || next.spans[0].IsValid() {
			t.Errorf("%T: the sink behind got %d calls, ctx span %v; want the caller's slice and ctx", tp, len(next.calls), next.spans)
		}
	}
	if n := len(rec.Ended()); n > 0 {
		t.Errorf("%d spans recorded by a provider that samples none", n)
	}
}

// TestSpanPerCallTraceFromEnqueueToConsumer: with SpanPerCall, a real relay publishes
// the producer's traceparent as it was written, so the consumer's span is the producer
// span's child, and the relay's send span (in a trace of its own) links to the producer.
func TestSpanPerCallTraceFromEnqueueToConsumer(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tp, rec := recorder(t)
	pctx, producer := tp.Tracer("app").Start(ctx, "place order")
	ev := outbox.Event{ID: outbox.NewID(), AggregateType: "order", AggregateID: "o-1", EventType: "order.placed", Payload: []byte(secretPayload)}
	outboxotel.Inject(pctx, &ev)
	enqueue(t, pool, ev)
	producer.End()

	mem := &memsink.Sink{}
	_, stop := runRelay(t, pool, outboxotel.NewSink(mem, &outboxotel.Config{TracerProvider: tp, System: "memory", Spans: outboxotel.SpanPerCall}), fastConfig())
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := mem.WaitFor(wctx, 1); err != nil {
		t.Fatalf("relay delivered %d of 1: %v", mem.Count(), err)
	}
	stop()
	m := mem.Messages()[0]
	if m.TraceParent != ev.TraceParent {
		t.Fatalf("the sink got traceparent %q, want the producer's %q", m.TraceParent, ev.TraceParent)
	}
	handler := outboxotel.Handler(func(context.Context, pgx.Tx, outbox.Message) error { return nil },
		&outboxotel.HandlerConfig{TracerProvider: tp, Consumer: "billing", System: "memory"})
	if res, err := inbox.Process(ctx, pool, "billing", m, handler); err != nil || res.Outcome != inbox.Applied {
		t.Fatalf("process: %v %v", res.Outcome, err)
	}

	spans := rec.Ended()
	if n := len(spansOf(spans, "publish", ev.ID.String())); n != 0 {
		t.Errorf("%d per-message publish spans", n)
	}
	sends := named(spans, "send order.placed")
	if len(sends) != 1 {
		t.Fatalf("%d send spans, want 1", len(sends))
	}
	send := sends[0]
	if l := send.Links(); len(l) != 1 || !l[0].SpanContext.Equal(producer.SpanContext().WithRemote(true)) {
		t.Errorf("send span links %+v, want the producer's span", l)
	}
	if send.SpanContext().TraceID() == producer.SpanContext().TraceID() {
		t.Error("the send span is in the producer's trace, want one of its own")
	}
	process := spansOf(spans, "process", ev.ID.String())
	if len(process) != 1 {
		t.Fatalf("%d process spans", len(process))
	}
	checkChild(t, process[0], producer.SpanContext(), trace.SpanKindConsumer, true)
	noPayload(t, spans)
}
