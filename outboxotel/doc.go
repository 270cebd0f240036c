// Package outboxotel traces events through the outbox with OpenTelemetry: from the
// producer's transaction, through the relay's publish, to the consumer's handler, in
// one trace.
//
// The root module knows nothing of OpenTelemetry: an event carries a W3C traceparent
// ([outbox.Event.TraceParent], stored in the trace_parent column and sent by every sink
// as the header traceparent), and this module fills and reads it.
//
//   - Producer: [TraceParent] (or [Inject]) puts the current span's traceparent on the
//     event before Enqueue.
//   - Relay: [NewSink] wraps the relay's sink; it starts one Producer span per message,
//     a child of the event's traceparent, and hands the sink the message with the
//     traceparent of that span, so the consumer becomes its child. With
//     [Config.Spans] = [SpanPerCall] it starts one span per Publish call instead,
//     linked to the events' traceparents, which go to the sink as they are (a fraction
//     of the cost when every trace is sampled; no span per event).
//   - Consumer: [Handler] (and [SQLHandler]) wraps an [inbox.Handler] in a Consumer span,
//     a child of the message's traceparent; [ContextFromMessage] gives a context carrying
//     that parent for handlers of one's own.
//
// Spans carry the event's identity and routing (id, type, aggregate, attempt), never its
// payload or headers. With no TracerProvider installed (the OpenTelemetry default, a
// no-op) the wrappers start no spans worth recording and pass the messages through as
// they are. docs/adr/0023-traces-through-a-sink-wrapper.md records the design,
// docs/adr/0028-a-span-per-publish-call.md the span per call.
package outboxotel
