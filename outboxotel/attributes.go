package outboxotel

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

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

// appendMessageAttributes appends to attrs the attributes every span of msg carries:
// semantic conventions first, then the outbox's own. (The SDK copies what SetAttributes
// is given, so a caller reuses one buffer for all the messages of a call.)
// id is msg.ID as a string (the caller may have it already).
func appendMessageAttributes(attrs []attribute.KeyValue, system, destination, id string, msg *outbox.Message) []attribute.KeyValue {
	if system != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(system))
	}
	if destination != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(destination))
	}
	attrs = append(attrs,
		semconv.MessagingMessageID(id),
		AttrEventType.String(msg.EventType),
		AttrAggregateType.String(msg.AggregateType),
		AttrAggregateID.String(msg.AggregateID),
	)
	if msg.AggregateVersion != 0 {
		attrs = append(attrs, AttrAggregateVersion.Int64(msg.AggregateVersion))
	}
	if msg.Attempt != 0 {
		attrs = append(attrs, AttrAttempt.Int(msg.Attempt))
	}
	return attrs
}

// spanName is "<operation> <destination>", or "<operation> <event type>" when the
// destination is not known (both are of low cardinality).
func spanName(operation, destination string, msg *outbox.Message) string {
	if suffix := spanSuffix(destination, msg); suffix != "" {
		return operation + " " + suffix
	}
	return operation
}

// spanSuffix is what follows the operation in a span's name: the destination, or the
// event type when the destination is not known ("" when neither is).
func spanSuffix(destination string, msg *outbox.Message) string {
	if destination != "" {
		return destination
	}
	return msg.EventType
}

// maxCachedNames bounds a nameCache: names past it are built for each span (a
// Destination of high cardinality does not grow the cache without end).
const maxCachedNames = 1024

// nameCache holds the span names of one operation by suffix, so that a span's name is
// not built (an allocation) for each message. Reads take no lock: a new name copies the
// map.
type nameCache struct {
	operation string
	names     atomic.Pointer[map[string]string]
	mu        sync.Mutex
}

// of returns the span name for suffix: "<operation> <suffix>", or the operation alone.
func (c *nameCache) of(suffix string) string {
	if suffix == "" {
		return c.operation
	}
	if m := c.names.Load(); m != nil {
		if name, ok := (*m)[suffix]; ok {
			return name
		}
	}
	name := c.operation + " " + suffix
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.names.Load()
	if old != nil && len(*old) >= maxCachedNames {
		return name
	}
	m := make(map[string]string, 1+lenOf(old))
	if old != nil {
		maps.Copy(m, *old)
	}
	m[suffix] = name
	c.names.Store(&m)
	return name
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// The start options without a link, made once (the SDK does not keep the slice).
var (
	kindOptions = map[trace.SpanKind][]trace.SpanStartOption{
		trace.SpanKindProducer: {trace.WithSpanKind(trace.SpanKindProducer)},
		trace.SpanKindConsumer: {trace.WithSpanKind(trace.SpanKindConsumer)},
	}
	rootOptions = map[trace.SpanKind][]trace.SpanStartOption{
		trace.SpanKindProducer: {trace.WithSpanKind(trace.SpanKindProducer), trace.WithNewRoot()},
		trace.SpanKindConsumer: {trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot()},
	}
)

// startOptions are the options of a span whose parent is the message's span context
// (parent) rather than the caller's (in ctx): the caller's span, when there is one and
// it is not the parent, becomes a link. A message without a valid traceparent starts a
// new trace when newRoot is set, and is a child of the caller's span otherwise.
func startOptions(ctx context.Context, kind trace.SpanKind, parent trace.SpanContext, newRoot bool) (context.Context, []trace.SpanStartOption) {
	caller := trace.SpanContextFromContext(ctx)
	if !parent.IsValid() && !newRoot {
		return ctx, kindOptions[kind]
	}
	opts := kindOptions[kind]
	if !parent.IsValid() {
		opts = rootOptions[kind]
	}
	if caller.IsValid() && !caller.Equal(parent) {
		opts = append(slices.Clip(opts), trace.WithLinks(trace.Link{SpanContext: caller}))
	}
	if !parent.IsValid() {
		return ctx, opts
	}
	return trace.ContextWithRemoteSpanContext(ctx, parent), opts
}
