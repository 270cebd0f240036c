package outboxotel

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
)

// Version is this module's version, recorded as the tracer's instrumentation version.
const Version = "0.1.0"

// Config tunes [NewSink]. The zero value (or nil) uses the global TracerProvider.
type Config struct {
	// TracerProvider starts the spans. Default: otel.GetTracerProvider() (the global
	// provider; a no-op until the application sets one).
	TracerProvider trace.TracerProvider
	// System is messaging.system, the broker the sink writes to: "kafka", "nats",
	// "rabbitmq", "redis", "aws_sqs", "http". Default: none (the attribute is left out).
	System string
	// Destination returns messaging.destination.name for a message: the topic, subject,
	// stream or queue the sink routes it to. Default: the message's Topic when it is set,
	// none otherwise. It must be quick and must not keep msg.
	Destination func(msg outbox.Message) string
}

// NewSink returns a Sink that traces every message it passes to next. It keeps the
// [outbox.Sink] contract of next: msgs is never modified (a copy goes to next when a
// traceparent changes), and next's results are returned as they are.
//
// For each message it starts a span of kind Producer named "publish <destination>" (or
// "publish <event type>"), a child of the message's TraceParent (the producer's span,
// written at Enqueue), or a new trace's root when the message has none; a span in ctx,
// if any, becomes a link. next receives the message with its TraceParent replaced by
// that span's, so the consumer's spans are children of the publish span. The span lasts
// the Publish call, and a failed result sets its status to Error with error.type one of
// the ErrorType constants. Spans carry the event's id, type, aggregate, seq and attempt
// (see the Attr constants), never its payload or headers.
//
// With a no-op TracerProvider the messages go to next as they are, with no copy.
func NewSink(next outbox.Sink, cfg *Config) outbox.Sink {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return &tracingSink{
		next:        next,
		tracer:      c.TracerProvider.Tracer(instrumentationName, trace.WithInstrumentationVersion(Version)),
		system:      c.System,
		destination: c.Destination,
	}
}

var publishOperation = semconv.MessagingOperationName("publish")

type tracingSink struct {
	next        outbox.Sink
	tracer      trace.Tracer
	system      string
	destination func(outbox.Message) string
}

func (s *tracingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if len(msgs) == 0 {
		return s.next.Publish(ctx, msgs)
	}
	var spans []trace.Span
	var attrs []attribute.KeyValue // one buffer for every span of the call
	var out []outbox.Message       // a copy of msgs, made at the first traceparent that changes
	for i := range msgs {
		m := &msgs[i]
		parent := spanContextOf(m.TraceParent)
		dest := s.destinationOf(m)
		pctx, opts := startOptions(ctx, trace.SpanKindProducer, parent, true)
		_, span := s.tracer.Start(pctx, spanName("publish", dest, m), opts...)
		if i == 0 && isNoop(span, parent) {
			// A no-op tracer (no provider installed): it hands back the parent's span
			// context and records nothing, for every message alike. Pass msgs on as
			// they are.
			return s.next.Publish(ctx, msgs)
		}
		if spans == nil {
			spans = make([]trace.Span, len(msgs))
		}
		spans[i] = span
		if span.IsRecording() {
			attrs = append(attrs[:0], publishOperation, semconv.MessagingOperationTypeSend)
			attrs = appendMessageAttributes(attrs, s.system, dest, m)
			span.SetAttributes(attrs...)
		}
		sc := span.SpanContext()
		if !sc.IsValid() || sc.Equal(parent) {
			continue
		}
		if tp := formatSpanContext(sc); tp != m.TraceParent {
			if out == nil {
				out = slices.Clone(msgs)
			}
			out[i].TraceParent = tp
		}
	}
	send := msgs
	if out != nil {
		send = out
	}
	errs := s.next.Publish(ctx, send)
	for i, span := range spans {
		if i < len(errs) && errs[i] != nil {
			setError(span, errs[i])
		}
		span.End()
	}
	return errs
}

// isNoop reports whether span, started with parent as its parent, is a no-op tracer's:
// not recording, with the parent's span context (an invalid one for a root). An SDK
// span that is not sampled has a span id of its own, so it does not pass for one.
func isNoop(span trace.Span, parent trace.SpanContext) bool {
	if span.IsRecording() {
		return false
	}
	sc := span.SpanContext()
	return !sc.IsValid() || sc.Equal(parent)
}

func (s *tracingSink) destinationOf(m *outbox.Message) string {
	if s.destination != nil {
		return s.destination(*m)
	}
	return m.Topic
}
