package outboxotel_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/jackc/pgx/v5/pgxpool"

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
// 1000 aggregates, 20 events each, each event with a traceparent of its own.
const drainEvents = 20000

// drainPoll is the idle relay's poll interval in BenchmarkRelayDrain: it is woken when
// the events are written, and polls in case a wake-up came while its workers were busy.
const drainPoll = 5 * time.Millisecond

// drainer is one relay over a database of its own, idle between drains.
type drainer struct {
	pool    *pgxpool.Pool
	relay   *relay.Relay
	counter *countSink
	want    int64
	flags   string // the trace flags of the events' traceparents: "01" sampled, "00" not
}

// newDrainer starts a relay over a fresh database; traced wraps its sink in NewSink over
// an SDK TracerProvider (default sampler: parent-based, always on; batch span processor;
// an exporter that discards).
func newDrainer(b *testing.B, traced bool, flags string) *drainer {
	d := &drainer{pool: pgtest.Pool(b), counter: &countSink{}, flags: flags}
	var sink outbox.Sink = d.counter
	if traced {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		sink = outboxotel.NewSink(d.counter, &outboxotel.Config{TracerProvider: tp, System: "bench"})
	}
	d.relay, _ = runRelay(b, d.pool, sink, &relay.Config{
		Wakeup: relay.WakeupPoll, PollInterval: drainPoll, FallbackPollInterval: drainPoll,
		Logger: slog.New(slog.DiscardHandler),
	})
	d.drain(b) // not counted: the first drain also takes the leases and warms the caches
	return d
}

// drain writes drainEvents events (one INSERT, not timed), wakes the relay and returns
// how long it took until the sink had counted them all.
func (d *drainer) drain(b *testing.B) time.Duration {
	ctx := context.Background()
	if _, err := d.pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, trace_parent)
		SELECT gen_random_uuid(), 'order', (g % 1000)::text, 'order.created', '{"n": 1}',
			'00-' || md5(g::text || clock_timestamp()) || '-' || left(md5('s' || g || clock_timestamp()), 16) || '-' || $2
		FROM generate_series(1, $1) AS g`, drainEvents, d.flags); err != nil {
		b.Fatal(err)
	}
	d.want += drainEvents
	start := time.Now()
	d.relay.Wake()
	for d.counter.n.Load() < d.want {
		time.Sleep(200 * time.Microsecond)
		if time.Since(start) > time.Minute {
			var pending int64
			_ = d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox.events WHERE published_at IS NULL`).Scan(&pending)
			b.Fatalf("drained %d of %d in a minute; %d pending", d.counter.n.Load(), d.want, pending)
		}
	}
	return time.Since(start)
}

// BenchmarkRelayDrain measures a relay (ordered mode, the default batch sizes) draining
// drainEvents events per iteration (1000 aggregates, each event with a traceparent of
// its own) through a sink that only counts:
//   - tracing=off: the sink as it is; tracing=on: wrapped by NewSink, every span sampled;
//   - ab: three relays on three databases, drained one after another in each iteration
//     (the order rotating), so the machine's load falls on all alike: off, on, and on
//     with producers that were not sampled (traceparent flags 00: the parent-based
//     sampler records none of the publish spans). It reports each one's events/s and
//     the ratios to off.
func BenchmarkRelayDrain(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			d := newDrainer(b, mode == "on", "01")
			var elapsed time.Duration
			n := 0
			for b.Loop() {
				elapsed += d.drain(b)
				n++
			}
			b.ReportMetric(float64(n*drainEvents)/elapsed.Seconds(), "events/s")
		})
	}
	b.Run("ab", func(b *testing.B) {
		arms := []struct {
			name string
			d    *drainer
			took time.Duration
		}{
			{name: "off", d: newDrainer(b, false, "01")},
			{name: "on", d: newDrainer(b, true, "01")},
			{name: "on-unsampled", d: newDrainer(b, true, "00")},
		}
		i := 0
		for b.Loop() {
			for k := range arms {
				a := &arms[(i+k)%len(arms)]
				a.took += a.d.drain(b)
			}
			i++
		}
		rate := func(k int) float64 { return float64(i*drainEvents) / arms[k].took.Seconds() }
		for k, a := range arms {
			b.ReportMetric(rate(k), a.name+"-events/s")
			if k > 0 {
				b.ReportMetric(rate(k)/rate(0), a.name+"/off")
			}
		}
	})
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
	// The same messages from a producer whose span was not sampled: the default sampler
	// (parent-based) records none of theirs.
	unsampled := slices.Clone(msgs)
	for i := range unsampled {
		unsampled[i].TraceParent = strings.TrimSuffix(unsampled[i].TraceParent, "-01") + "-00"
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
