package outboxotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox"
)

// instrumentationName names the tracer of this module's spans.
const instrumentationName = "github.com/outboxkit/outbox/outboxotel"

// The outbox's own span attributes. Spans carry an event's identity and routing, never
// its payload or headers.
const (
	// AttrEventType is the event's type (outbox.Event.EventType).
	AttrEventType = attribute.Key("outbox.event.type")
	// AttrEventSeq is the event's write order in the outbox table.
	AttrEventSeq = attribute.Key("outbox.event.seq")
	// AttrAggregateType is the event's aggregate type.
	AttrAggregateType = attribute.Key("outbox.aggregate.type")
	// AttrAggregateID is the event's aggregate id.
	AttrAggregateID = attribute.Key("outbox.aggregate.id")
	// AttrAggregateVersion is the event's aggregate version, when it has one.
	AttrAggregateVersion = attribute.Key("outbox.aggregate.version")
	// AttrAttempt is the relay's publish attempt of the event (1 for the first).
	AttrAttempt = attribute.Key("outbox.attempt")
)

// The values of error.type on a failed publish span.
const (
	ErrorTypeNotSent     = "not_sent"    // outbox.ErrNotSent: an earlier message of the aggregate failed
	ErrorTypePermanent   = "permanent"   // outbox.Permanent: the event goes dead
	ErrorTypeUnavailable = "unavailable" // outbox.Unavailable: the sink is down
	ErrorTypeRetryAfter  = "retry_after" // outbox.RetryAfter: the broker asked for a pause
	ErrorTypeCanceled    = "canceled"    // the call's context ended
	ErrorTypeTransient   = "transient"   // any other error: retried after a backoff
)

// errorType classifies err as the relay does (the outbox's error marks).
func errorType(err error) string {
	switch {
	case errors.Is(err, outbox.ErrNotSent):
		return ErrorTypeNotSent
	case outbox.IsPermanent(err):
		return ErrorTypePermanent
	case outbox.IsUnavailable(err):
		return ErrorTypeUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ErrorTypeCanceled
	}
	if _, ok := outbox.RetryAfterOf(err); ok {
		return ErrorTypeRetryAfter
	}
	return ErrorTypeTransient
}

// setError marks span as failed with err.
func setError(span trace.Span, err error) {
	span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
	span.SetStatus(codes.Error, err.Error())
}

// messageAttributes are the attributes every span of msg carries: semantic
// conventions first, then the outbox's own.
func messageAttributes(system, destination string, msg *outbox.Message, extra ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12+len(extra))
	if system != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(system))
	}
	if destination != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(destination))
	}
	attrs = append(attrs,
		semconv.MessagingMessageID(msg.ID.String()),
		semconv.MessagingMessageBodySize(len(msg.Payload)),
		AttrEventType.String(msg.EventType),
		AttrAggregateType.String(msg.AggregateType),
		AttrAggregateID.String(msg.AggregateID),
	)
	if msg.Seq != 0 {
		attrs = append(attrs, AttrEventSeq.Int64(msg.Seq))
	}
	if msg.AggregateVersion != 0 {
		attrs = append(attrs, AttrAggregateVersion.Int64(msg.AggregateVersion))
	}
	if msg.Attempt != 0 {
		attrs = append(attrs, AttrAttempt.Int(msg.Attempt))
	}
	return append(attrs, extra...)
}

// spanName is "<operation> <destination>", or "<operation> <event type>" when the
// destination is not known (both are of low cardinality).
func spanName(operation, destination string, msg *outbox.Message) string {
	if destination != "" {
		return operation + " " + destination
	}
	if msg.EventType != "" {
		return operation + " " + msg.EventType
	}
	return operation
}

// startOptions are the options of a span whose parent is the message's span context
// (parent) rather than the caller's (in ctx): the caller's span, when there is one and
// it is not the parent, becomes a link. A message without a valid traceparent starts a
// new trace when newRoot is set, and is a child of the caller's span otherwise.
func startOptions(ctx context.Context, kind trace.SpanKind, parent trace.SpanContext, newRoot bool) (context.Context, []trace.SpanStartOption) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind)}
	caller := trace.SpanContextFromContext(ctx)
	if !parent.IsValid() {
		if !newRoot {
			return ctx, opts
		}
		opts = append(opts, trace.WithNewRoot())
	}
	if caller.IsValid() && !caller.Equal(parent) {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
	}
	if !parent.IsValid() {
		return ctx, opts
	}
	return trace.ContextWithRemoteSpanContext(ctx, parent), opts
}
