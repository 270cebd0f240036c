package outboxotel_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/relay"
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

// drainEvents is how many events one iteration of BenchmarkRelayDrain writes and drains:
// 1000 aggregates, 5 events each, each event with a traceparent of its own.
const drainEvents = 5000

// BenchmarkRelayDrain measures a relay (ordered mode, the default batch sizes) draining
// drainEvents events per iteration through a sink that only counts, with tracing off
// (the sink as it is) and on (NewSink over an SDK TracerProvider sampling every span,
// with a batch span processor and an exporter that discards). The events are written
// with the timer stopped; the relay, idle in between (it polls once an hour), is woken.
// Run with -count to interleave off and on: bench/RESULTS.md-style figures need a
// quiet machine.
func BenchmarkRelayDrain(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.Pool(b)
			counter := &countSink{}
			var sink outbox.Sink = counter
			if mode == "on" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				sink = outboxotel.NewSink(counter, &outboxotel.Config{TracerProvider: tp, System: "bench"})
			}
			r, _ := runRelay(b, pool, sink, &relay.Config{
				Wakeup: relay.WakeupPoll, PollInterval: time.Hour, FallbackPollInterval: time.Hour,
				Logger: slog.New(slog.DiscardHandler),
			})
			var want int64
			var elapsed time.Duration
			b.ResetTimer()
			b.StopTimer()
			for range b.N {
				if _, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, trace_parent)
					SELECT gen_random_uuid(), 'order', (g % 1000)::text, 'order.created', '{"n": 1}',
						'00-' || md5(g::text || clock_timestamp()) || '-' || left(md5('s' || g || clock_timestamp()), 16) || '-01'
					FROM generate_series(1, $1) AS g`, drainEvents); err != nil {
					b.Fatal(err)
				}
				want += drainEvents
				b.StartTimer()
				start := time.Now()
				r.Wake()
				for counter.n.Load() < want {
					time.Sleep(200 * time.Microsecond)
				}
				elapsed += time.Since(start)
				b.StopTimer()
			}
			b.ReportMetric(float64(want)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkSinkPublish measures the wrapper's cost per message: a Publish call of 100
// messages (each with a traceparent) to a sink that only counts, bare, wrapped over a
// no-op TracerProvider, and wrapped over an SDK provider sampling every span (batch
// processor, discarding exporter).
func BenchmarkSinkPublish(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pctx, parent := tp.Tracer("bench").Start(context.Background(), "write")
	parent.End()
	msgs := messages(100, outboxotel.TraceParent(pctx))
	for i := range msgs {
		msgs[i].TraceParent = outboxotel.TraceParent(pctx)
	}
	next := &countSink{}
	for _, c := range []struct {
		name string
		sink outbox.Sink
	}{
		{"bare", next},
		{"noop", outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: noop.NewTracerProvider()})},
		{"sdk", outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp, System: "bench"})},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.sink.Publish(context.Background(), msgs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
		})
	}
}
