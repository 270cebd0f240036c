package outboxotel

import (
	"context"
	"slices"
	"strings"

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
	// Spans is how many spans the sink records: [SpanPerMessage] (the default, one a
	// message, each a child of its producer's span and the parent of its consumer's) or
	// [SpanPerCall] (one a Publish call, linked to the messages' producer spans; a
	// fraction of the cost when every trace is sampled, but no per-event outcome).
	Spans SpanMode
	// MaxLinks is, with [SpanPerCall], the most links a send span gets; the messages
	// past it are counted in [AttrBatchUnlinkedCount]. Default [DefaultMaxLinks] (128,
	// the SDK's default LinkCountLimit, which drops links past it too: raise both
	// together, with sdktrace.WithRawSpanLimits). Negative: no links.
	MaxLinks int
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
// (see the Attr constants), never its payload or headers. That is [SpanPerMessage], the
// default.
//
// With [Config.Spans] set to [SpanPerCall] it starts one span of kind Producer for each
// call, named "send <destination>" ("send <event type>" when the messages have no
// destination and one event type, "send" when they differ), a child of the span in ctx
// or a new trace's root, with messaging.batch.message_count and a link to each
// message's TraceParent; next gets msgs as they are, with ctx carrying the send span.
// See [SpanPerCall] for what it records and what it does not.
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
	tracer := c.TracerProvider.Tracer(instrumentationName, trace.WithInstrumentationVersion(Version))
	if c.Spans == SpanPerCall {
		maxLinks := c.MaxLinks
		if maxLinks == 0 {
			maxLinks = DefaultMaxLinks
		}
		return &callSink{
			next: next, tracer: tracer, system: c.System, destination: c.Destination,
			maxLinks: max(maxLinks, 0), names: nameCache{operation: "send"},
		}
	}
	return &tracingSink{
		next:        next,
		tracer:      tracer,
		system:      c.System,
		destination: c.Destination,
		names:       nameCache{operation: "publish"},
	}
}

var publishOperation = semconv.MessagingOperationName("publish")

type tracingSink struct {
	next        outbox.Sink
	tracer      trace.Tracer
	system      string
	destination func(outbox.Message) string
	names       nameCache
}

func (s *tracingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if len(msgs) == 0 {
		return s.next.Publish(ctx, msgs)
	}
	var (
		spans  []trace.Span
		parent trace.SpanContext
		pctx   context.Context
		opts   []trace.SpanStartOption
		attrs  []attribute.KeyValue // one buffer for every span of the call (the SDK copies it)
		out    []outbox.Message     // a copy of msgs, made at the first traceparent that changes
		// text holds the strings the spans and the copy of msgs get (the messages' ids,
		// the spans' traceparents), cut out of one buffer: one allocation for the call,
		// not two for each message.
		text    strings.Builder
		scratch [traceparentLen]byte
	)
	for i := range msgs {
		m := &msgs[i]
		// Messages of one producer's transaction share a traceparent: the context that
		// carries it as the parent is made once for a run of them.
		if p := spanContextOf(m.TraceParent); i == 0 || !p.Equal(parent) {
			parent = p
			pctx, opts = startOptions(ctx, trace.SpanKindProducer, parent, true)
		}
		dest := s.destinationOf(m)
		_, span := s.tracer.Start(pctx, s.names.of(spanSuffix(dest, m)), opts...)
		if i == 0 {
			if isNoop(span, parent) {
				// A no-op tracer (no provider installed): it hands back the parent's span
				// context and records nothing, for every message alike. Pass msgs on as
				// they are.
				return s.next.Publish(ctx, msgs)
			}
			spans = make([]trace.Span, len(msgs))
			text.Grow(len(msgs) * (uuidLen + traceparentLen))
		}
		spans[i] = span
		if span.IsRecording() {
			id := cut(&text, appendUUID(scratch[:0], m.ID))
			attrs = append(attrs[:0], publishOperation, semconv.MessagingOperationTypeSend)
			attrs = appendMessageAttributes(attrs, s.system, dest, id, m)
			span.SetAttributes(attrs...)
		}
		sc := span.SpanContext()
		if !sc.IsValid() || sc.Equal(parent) {
			continue
		}
		if tp := appendSpanContext(scratch[:0], sc); string(tp) != m.TraceParent {
			if out == nil {
				out = slices.Clone(msgs)
			}
			out[i].TraceParent = cut(&text, tp)
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

// cut appends b to text and returns it as a string that shares text's buffer (a
// Builder only appends, so the bytes of a string it returned never change).
func cut(text *strings.Builder, b []byte) string {
	n := text.Len()
	text.Write(b)
	return text.String()[n:]
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
