package outboxotel_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxotel"
)

// countSink acknowledges every message and counts them.
type countSink struct{ n atomic.Int64 }

func (c *countSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	c.n.Add(int64(len(msgs)))
	return make([]error, len(msgs))
}

// discardExporter is a span exporter that drops what it is given: the SDK's work (span
// building, the batch processor) is measured, not an exporter's network.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkSinkPublish measures the wrapper's cost per message: a Publish call of 100
// messages (each with a traceparent) to a sink that only counts, bare, wrapped over a
// no-op TracerProvider, and wrapped over an SDK provider sampling every span (batch
// processor, discarding exporter): all messages of one producer span, each of its own
// (sdk-distinct), or of a producer span that was not sampled; and with SpanPerCall, one
// span a call linked to the messages' distinct producers (sdk-per-call).
func BenchmarkSinkPublish(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pctx, parent := tp.Tracer("bench").Start(context.Background(), "write")
	parent.End()
	msgs := messages(100, outboxotel.TraceParent(pctx))
	for i := range msgs {
		msgs[i].TraceParent = outboxotel.TraceParent(pctx)
	}
	// The same messages from a producer whose span was not sampled: the default sampler
	// (parent-based) records none of theirs.
	unsampled := slices.Clone(msgs)
	for i := range unsampled {
		unsampled[i].TraceParent = strings.TrimSuffix(unsampled[i].TraceParent, "-01") + "-00"
	}
	// Each message from a producer span of its own (as a relay's backlog mostly is): no
	// two share a parent.
	distinct := slices.Clone(msgs)
	for i := range distinct {
		ctx, s := tp.Tracer("bench").Start(context.Background(), "write")
		s.End()
		distinct[i].TraceParent = outboxotel.TraceParent(ctx)
	}
	next := &countSink{}
	for _, c := range []struct {
		name string
		sink outbox.Sink
		msgs []outbox.Message
	}{
		{"bare", next, msgs},
		{"noop", outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: noop.NewTracerProvider()}), msgs},
		{"sdk", outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, System: "bench"}), msgs},
		{"sdk-distinct", outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, System: "bench"}), distinct},
		{"sdk-per-call", outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, System: "bench", Spans: outboxotel.SpanPerCall}), distinct},
		{"sdk-unsampled", outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, System: "bench"}), unsampled},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.sink.Publish(context.Background(), c.msgs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.msgs)), "ns/msg")
		})
	}
}
