package outboxotel

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
)

// traceContext is the W3C Trace Context propagator: the traceparent column and header
// are W3C traceparents whatever propagator the application installed globally.
var traceContext propagation.TraceContext

// traceparentKey is the W3C header name, the one key the carrier keeps.
const traceparentKey = "traceparent"

// carrier is a TextMapCarrier holding one traceparent, without the map of
// propagation.MapCarrier (one allocation less per message).
type carrier struct{ traceparent string }

func (c *carrier) Get(key string) string {
	if key == traceparentKey {
		return c.traceparent
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == traceparentKey {
		c.traceparent = value
	}
}

func (c *carrier) Keys() []string { return []string{traceparentKey} }

// TraceParent returns the W3C traceparent of the span in ctx, for
// [outbox.Event.TraceParent]; "" when ctx carries no valid span context.
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return formatSpanContext(sc)
}

// formatSpanContext returns the traceparent of a valid sc.
func formatSpanContext(sc trace.SpanContext) string {
	var c carrier
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	return c.traceparent
}

// Inject sets ev.TraceParent to the traceparent of the span in ctx, when there is one,
// and leaves it as it is otherwise. Call it before [outbox.Enqueue].
func Inject(ctx context.Context, ev *outbox.Event) {
	if tp := TraceParent(ctx); tp != "" {
		ev.TraceParent = tp
	}
}

// spanContextOf parses a traceparent; the zero (invalid) SpanContext when tp is empty
// or malformed. A parsed span context is remote.
func spanContextOf(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	c := carrier{traceparent: tp}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), &c))
}

// ContextFromMessage returns ctx carrying the span context of msg.TraceParent as a
// remote parent, so spans started from it are children of the span that published the
// message (or, for a message not published through [NewSink], of the producer's). ctx
// is returned as it is when msg has no valid traceparent.
func ContextFromMessage(ctx context.Context, msg outbox.Message) context.Context {
	sc := spanContextOf(msg.TraceParent)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
