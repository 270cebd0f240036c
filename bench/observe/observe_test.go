package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
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

// drainPoll is the idle relay's poll interval. It is woken when the events are
// written, and claims again at once after a batch that found work, so polling does not
// end a drain; seven idle relays polling every few milliseconds would add their probes
// to every arm's CPU time.
const drainPoll = 500 * time.Millisecond

// arm is one relay over a database of its own, idle between drains, with metrics
// and/or tracing on.
type arm struct {
	name    string
	pool    *pgxpool.Pool
	relay   *relay.Relay
	counter *countSink
	want    int64
	rounds  []round                  // one a drain counted
	tp      *sdktrace.TracerProvider // nil: no tracing
	// sampledEvery: one event in sampledEvery has a sampled traceparent (flags 01), the
	// others an unsampled one (00): producers sampling 1/sampledEvery of their traces.
	sampledEvery int
}

// round is what one drain of an arm took: wall time, and the CPU time of this process
// (every arm's relay, the idle ones too) and of the database cluster.
type round struct {
	took time.Duration
	cpu  cpuTime
}

// tracing is how an arm traces: not at all, or through outboxotel.NewSink in one of its
// span modes.
type tracing int

const (
	noTracing tracing = iota
	perMessage
	perCall
	perCallNoLinks // SpanPerCall with MaxLinks -1
)

// newArm starts a relay (ordered mode, the defaults) over a fresh database. Metrics: an
// outboxprom.Metrics as its Observer, its gauges refreshed by Run (the default 10 s
// interval) and gathered every second, as a busy Prometheus would scrape. Tracing: its
// sink wrapped in outboxotel.NewSink (a span a message, or a span a Publish call) over
// an SDK TracerProvider (parent-based sampler, batch span processor, an exporter that
// discards).
func newArm(b *testing.B, name string, metrics bool, tr tracing, sampledEvery int) *arm {
	a := &arm{name: name, pool: pgtest.Pool(b), counter: &countSink{}, sampledEvery: sampledEvery}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var sink outbox.Sink = a.counter
	if tr != noTracing {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		a.tp = tp
		cfg := &outboxotel.Config{TracerProvider: tp, System: "bench"}
		if tr != perMessage {
			cfg.Spans = outboxotel.SpanPerCall
		}
		if tr == perCallNoLinks {
			cfg.MaxLinks = -1
		}
		sink = outboxotel.NewSink(a.counter, cfg)
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
	a.drain(b, nil) // not counted: the first drain also takes the leases and warms the caches
	return a
}

// drain writes drainEvents events (one INSERT, not timed), wakes the relay and returns
// how long it took until the sink had counted them all, and the CPU time clock (if not
// nil) saw used meanwhile and in exporting the arm's queued spans and collecting the
// garbage afterwards.
func (a *arm) drain(b *testing.B, clock *cpuClock) round {
	ctx := context.Background()
	if _, err := a.pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload, trace_parent)
		SELECT gen_random_uuid(), 'order', (g % 1000)::text, 'order.created', '{"n": 1}',
			'00-' || md5(g::text || clock_timestamp()) || '-' || left(md5('s' || g || clock_timestamp()), 16)
				|| CASE WHEN g % $2 = 0 THEN '-01' ELSE '-00' END
		FROM generate_series(1, $1) AS g`, drainEvents, a.sampledEvery); err != nil {
		b.Fatal(err)
	}
	a.want += drainEvents
	var cpu0 cpuTime
	if clock != nil {
		cpu0 = clock.now()
	}
	start := time.Now()
	a.relay.Wake()
	for a.counter.n.Load() < a.want {
		time.Sleep(200 * time.Microsecond)
		if time.Since(start) > time.Minute {
			b.Fatalf("%s drained %d of %d in a minute", a.name, a.counter.n.Load(), a.want)
		}
	}
	r := round{took: time.Since(start)}
	if clock != nil {
		// The arm's leftovers are its own CPU time, not the next arm's: the spans still
		// queued are exported, the garbage collected.
		if a.tp != nil {
			if err := a.tp.ForceFlush(ctx); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		r.cpu = clock.now().sub(cpu0)
	}
	return r
}

// BenchmarkObservabilityAB: eight relays on eight databases of the same PostgreSQL —
// nothing on; metrics on; tracing a span a message (every producer sampled); tracing a
// span a Publish call (outboxotel.SpanPerCall), with a link to each message's producer
// and with none; metrics with each kind of tracing; and
// metrics with a span a message when producers sample one trace in ten — each draining
// drainEvents events per iteration (a round), one after another in rotating order, so
// the machine's load falls on all alike.
//
// Throughput on two shared cores moves by ±15 % between arms of one round, more than
// the 3 % the tracing may cost, so besides each arm's events/s it reports CPU time an
// event, which the machine's other work moves much less: this process's (the relays;
// getrusage) and the database cluster's (/proc), read around each drain. Each is given
// as the median, over the rounds, of the ratio to the arm with nothing on in the same
// round, with a 95 % confidence interval of that median (distribution-free: order
// statistics of the rounds' ratios); and the relay CPU time an arm adds to an event, as
// a share of the off arm's whole CPU time an event (relay and database) in the same
// round, the least noisy estimate of what the arm costs a machine the relay shares with
// its database. After each drain the arm's queued spans are exported and the garbage
// collected, inside its CPU reading, so that neither falls on the next arm. The idle
// relays' polling is counted in every arm alike.
//
//	cd bench && go test -run '^$' -bench BenchmarkObservabilityAB -benchtime 20x ./observe/
func BenchmarkObservabilityAB(b *testing.B) {
	arms := []*arm{
		newArm(b, "off", false, noTracing, 1),
		newArm(b, "metrics", true, noTracing, 1),
		newArm(b, "tracing", false, perMessage, 1),
		newArm(b, "tracing-per-call", false, perCall, 1),
		newArm(b, "tracing-per-call-nolinks", false, perCallNoLinks, 1),
		newArm(b, "metrics+tracing", true, perMessage, 1),
		newArm(b, "metrics+tracing-per-call", true, perCall, 1),
		newArm(b, "metrics+tracing-10%", true, perMessage, 10),
	}
	clock := newCPUClock()
	i := 0
	for b.Loop() {
		for k := range arms {
			a := arms[(i+k)%len(arms)]
			a.rounds = append(a.rounds, a.drain(b, clock))
		}
		i++
	}
	b.StopTimer()
	report(b, arms, clock.hasDB())
}

// report prints a table of the arms' throughput and CPU time an event, and reports the
// medians of their ratios to the first arm's as the benchmark's metrics.
func report(b *testing.B, arms []*arm, hasDB bool) {
	off := arms[0]
	n := len(off.rounds)
	perEvent := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / drainEvents }
	measures := []struct {
		name string
		of   func(r round) float64
	}{
		{"events/s", func(r round) float64 { return drainEvents / r.took.Seconds() }},
		{"relay-cpu", func(r round) float64 { return perEvent(r.cpu.relay) }},
		{"db-cpu", func(r round) float64 { return perEvent(r.cpu.db) }},
		{"cpu", func(r round) float64 { return perEvent(r.cpu.relay + r.cpu.db) }},
	}
	if !hasDB {
		measures = measures[:2]
	}
	// added: the relay CPU an arm adds to an event, as a share of the off arm's CPU an
	// event (relay and database), from each round's pair; the database's time an event,
	// which tracing does not change, is the noisier part of the whole.
	added := func(a *arm, k int) float64 {
		o := off.rounds[k].cpu
		return float64(a.rounds[k].cpu.relay-o.relay) / float64(o.relay+o.db)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d rounds of %d events an arm; CPU in µs an event; ratio to off: median of the rounds' [its 95%% confidence interval]\n", n, drainEvents)
	fmt.Fprintf(&out, "%-26s", "arm")
	for _, m := range measures {
		fmt.Fprintf(&out, " %10s %-22s", m.name, "ratio")
	}
	if hasDB {
		out.WriteString(" relay CPU added, of off's CPU")
	}
	out.WriteString("\n")
	for _, a := range arms {
		fmt.Fprintf(&out, "%-26s", a.name)
		for _, m := range measures {
			var total float64
			ratios := make([]float64, n)
			for k := range n {
				v := m.of(a.rounds[k])
				total += v
				ratios[k] = v / m.of(off.rounds[k])
			}
			slices.Sort(ratios)
			med := quantile(ratios, 0.5)
			lo, hi := medianInterval(ratios)
			fmt.Fprintf(&out, " %10.2f %.3f [%.3f, %.3f]    ", total/float64(n), med, lo, hi)
			if a != off {
				b.ReportMetric(med, a.name+"-"+strings.TrimSuffix(m.name, "/s")+"/off")
			}
		}
		if hasDB {
			shares := make([]float64, n)
			for k := range n {
				shares[k] = added(a, k)
			}
			slices.Sort(shares)
			lo, hi := medianInterval(shares)
			med := quantile(shares, 0.5)
			fmt.Fprintf(&out, " %+6.1f%% [%+.1f%%, %+.1f%%]", 100*med, 100*lo, 100*hi)
			if a != off {
				b.ReportMetric(100*med, a.name+"-added-%")
			}
		}
		out.WriteString("\n")
	}
	fmt.Print(out.String())
}

// medianInterval returns a 95 % confidence interval of the median of the population
// sorted is a sample of, from order statistics: the ranks n/2 ± 1.96·√n/2 (the normal
// approximation of the binomial; the whole range for ten values or fewer).
func medianInterval(sorted []float64) (lo, hi float64) {
	n := len(sorted)
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	// the ranks (from 1) floor((n - 1.96√n)/2) and n+1 less it, as indexes
	k := max(int(math.Floor((float64(n)-1.96*math.Sqrt(float64(n)))/2))-1, 0)
	return sorted[k], sorted[n-1-k]
}

// quantile returns the q quantile of sorted (linear between the nearest ranks).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(pos)
	if lo+1 >= len(sorted) {
		return sorted[lo]
	}
	return sorted[lo] + (pos-float64(lo))*(sorted[lo+1]-sorted[lo])
}
