package outboxotel

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// HandlerConfig tunes [Handler] and [SQLHandler]. The zero value (or nil) uses the
// global TracerProvider.
type HandlerConfig struct {
	// TracerProvider starts the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Consumer is messaging.consumer.group.name: the inbox consumer's name. Default:
	// none (the attribute is left out).
	Consumer string
	// System is messaging.system, the broker the messages came from. Default: none.
	System string
	// Destination returns messaging.destination.name for a message. Default: the
	// message's Topic when it is set, none otherwise.
	Destination func(msg outbox.Message) string
}

// consumerTracer is the part of the handler wrappers that does not depend on the
// transaction type.
type consumerTracer struct {
	tracer      trace.Tracer
	system      string
	consumer    string
	destination func(outbox.Message) string
}

func newConsumerTracer(cfg *HandlerConfig) consumerTracer {
	var c HandlerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return consumerTracer{
		tracer: c.TracerProvider.Tracer(instrumentationName, trace.WithInstrumentationVersion(Version)),
		system: c.System, consumer: c.Consumer, destination: c.Destination,
	}
}

// run runs fn in a Consumer span for msg.
func (t consumerTracer) run(ctx context.Context, msg *outbox.Message, fn func(ctx context.Context) error) error {
	dest := msg.Topic
	if t.destination != nil {
		dest = t.destination(*msg)
	}
	pctx, opts := startOptions(ctx, trace.SpanKindConsumer, spanContextOf(msg.TraceParent), false)
	sctx, span := t.tracer.Start(pctx, spanName("process", dest, msg), opts...)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 11)
		attrs = append(attrs, semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess)
		if t.consumer != "" {
			attrs = append(attrs, semconv.MessagingConsumerGroupName(t.consumer))
		}
		span.SetAttributes(appendMessageAttributes(attrs, t.system, dest, msg.ID.String(), msg)...)
	}
	returned := false
	defer func() {
		if !returned { // the handler panicked: the inbox quarantines the event
			span.SetAttributes(semconv.ErrorTypeKey.String("panic"))
			span.SetStatus(codes.Error, "handler panicked")
			span.End()
		}
	}()
	err := fn(sctx)
	returned = true
	if err != nil {
		setError(span, err)
	}
	span.End()
	return err
}

// Handler wraps h so that it runs in a span of kind Consumer named
// "process <destination>" (or "process <event type>"), a child of the message's
// TraceParent — the publish span of [NewSink], or the producer's — or of the span in
// ctx when the message has none (a span in ctx that is not the parent becomes a link).
// h receives the span's context, so its own spans (database calls, requests) are
// children of it. An error sets the span's status to Error (error.type "permanent" for
// one marked [outbox.Permanent], the event is quarantined; "transient" otherwise), and
// so does a panic (error.type "panic"). Spans carry the event's identity, never its
// payload or headers.
//
// A message the inbox skips (a duplicate, a stale or parked version) never reaches h and
// gets no span; an event unparked by a later one gets a span of its own.
func Handler(h inbox.Handler, cfg *HandlerConfig) inbox.Handler {
	t := newConsumerTracer(cfg)
	return func(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
		return t.run(ctx, &msg, func(ctx context.Context) error { return h(ctx, tx, msg) })
	}
}

// SQLHandler is [Handler] for [inbox.SQLHandler] (database/sql).
func SQLHandler(h inbox.SQLHandler, cfg *HandlerConfig) inbox.SQLHandler {
	t := newConsumerTracer(cfg)
	return func(ctx context.Context, tx *sql.Tx, msg outbox.Message) error {
		return t.run(ctx, &msg, func(ctx context.Context) error { return h(ctx, tx, msg) })
	}
}
