package observe_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxotel"
	"github.com/outboxkit/outbox/outboxprom"
	"github.com/outboxkit/outbox/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// countSink acknowledges every message and counts them.
type countSink struct{ n atomic.Int64 }

func (c *countSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	c.n.Add(int64(len(msgs)))
	return make([]error, len(msgs))
}

// discardExporter drops the spans it is given: the SDK's work (span building, the batch
// processor) is measured, not an exporter's network.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// drainEvents is how many events one drain writes: 1000 aggregates, 20 events each,
// each event with a traceparent of its own (as producers using outboxotel.Inject write
// them), sampled or not as the arm says.
const drainEvents = 20000

// drainPoll is the idle relay's poll interval: it is woken when the events are written,
// and polls in case a wake-up came while its workers were busy.
const drainPoll = 5 * time.Millisecond

// arm is one relay over a database of its own, idle between drains, with metrics
// and/or tracing on.
type arm struct {
	name    string
	pool    *pgxpool.Pool
	relay   *relay.Relay
	counter *countSink
	want    int64
	took    time.Duration
	// sampledEvery: one event in sampledEvery has a sampled traceparent (flags 01), the
	// others an unsampled one (00): producers sampling 1/sampledEvery of their traces.
	sampledEvery int
}

// newArm starts a relay (ordered mode, the defaults) over a fresh database. Metrics: an
// outboxprom.Metrics as its Observer, its gauges refreshed by Run (the default 10 s
// interval) and gathered every second, as a busy Prometheus would scrape. Tracing: its
// sink wrapped in outboxotel.NewSink over an SDK TracerProvider (parent-based sampler,
// every producer sampled, batch span processor, an exporter that discards).
func newArm(b *testing.B, name string, metrics, tracing bool, sampledEvery int) *arm {
	a := &arm{name: name, pool: pgtest.Pool(b), counter: &countSink{}, sampledEvery: sampledEvery}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var sink outbox.Sink = a.counter
	if tracing {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		sink = outboxotel.NewSink(a.counter, &outboxotel.Config{TracerProvider: tp, System: "bench"})
	}
	cfg := &relay.Config{
		Wakeup: relay.WakeupPoll, PollInterval: drainPoll, FallbackPollInterval: drainPoll,
		Logger: slog.New(slog.DiscardHandler),
	}
	var m *outboxprom.Metrics
	if metrics {
		m = outboxprom.New(a.pool, nil)
		cfg.Observer = m
	}
	r, err := relay.New(a.pool, sink, cfg)
	if err != nil {
		b.Fatal(err)
	}
	a.relay = r
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("relay %s: %v", name, err)
		}
	})
	if metrics {
		m.Watch(r)
		reg := prometheus.NewRegistry()
		reg.MustRegister(m)
		go m.Run(ctx)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if _, err := reg.Gather(); err != nil {
						b.Errorf("gather %s: %v", name, err)
					}
				}
			}
		}()
	}
	a.drain(b) // not counted: the first drain also takes the leases and warms the caches
	return a
}

// drain writes drainEvents events (one INSERT, not timed), wakes the relay and returns
// how long it took until the sink had counted them all.
func (a *arm) drain(b *testing.B) time.Duration {
	ctx := context.Background()
	if _, err := a.pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, trace_parent)
		SELECT gen_random_uuid(), 'order', (g % 1000)::text, 'order.created', '{"n": 1}',
			'00-' || md5(g::text || clock_timestamp()) || '-' || left(md5('s' || g || clock_timestamp()), 16)
				|| CASE WHEN g % $2 = 0 THEN '-01' ELSE '-00' END
		FROM generate_series(1, $1) AS g`, drainEvents, a.sampledEvery); err != nil {
		b.Fatal(err)
	}
	a.want += drainEvents
	start := time.Now()
	a.relay.Wake()
	for a.counter.n.Load() < a.want {
		time.Sleep(200 * time.Microsecond)
		if time.Since(start) > time.Minute {
			b.Fatalf("%s drained %d of %d in a minute", a.name, a.counter.n.Load(), a.want)
		}
	}
	return time.Since(start)
}

// BenchmarkObservabilityAB: five relays on five databases of the same PostgreSQL —
// nothing on, metrics on, tracing on (every producer sampled), both, and both with
// producers sampling one trace in ten — each draining drainEvents events per iteration,
// one after another in rotating order, so the machine's load falls on all alike. It
// reports each arm's events/s and its ratio to the arm with nothing on.
//
//	cd bench && go test -run '^$' -bench BenchmarkObservabilityAB -benchtime 10x ./observe/
func BenchmarkObservabilityAB(b *testing.B) {
	arms := []*arm{
		newArm(b, "off", false, false, 1),
		newArm(b, "metrics", true, false, 1),
		newArm(b, "tracing", false, true, 1),
		newArm(b, "metrics+tracing", true, true, 1),
		newArm(b, "metrics+tracing-10%", true, true, 10),
	}
	i := 0
	for b.Loop() {
		for k := range arms {
			a := arms[(i+k)%len(arms)]
			a.took += a.drain(b)
		}
		i++
	}
	rate := func(a *arm) float64 { return float64(i*drainEvents) / a.took.Seconds() }
	for k, a := range arms {
		b.ReportMetric(rate(a), a.name+"-events/s")
		if k > 0 {
			b.ReportMetric(rate(a)/rate(arms[0]), a.name+"/off")
		}
	}
}
