package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/outboxkit/outbox/relay"
)

// scaleInstances are the instance counts of the ordered scale-out.
var scaleInstances = []int{1, 2, 4}

// scaleSinks are the slow sinks of the scale-out, with how they spend their latency.
var scaleSinks = []struct{ kind, desc string }{
	{sinkMemLatency, "memsink, Latency per message, messages of a call one after another"},
	{sinkAggLatency, "latency per message, one after another within an aggregate, aggregates of a call concurrently"},
}

func (b *bench) scale(ctx context.Context) (partReport, error) {
	settings := [][2]int{{b.o.batch, b.o.maxPerAggregate}, {100, 10}}
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Ordered scale-out against a slow sink\n\n")
	p("Ordered drain of %d events over %d aggregates (keep-then-delete; set-up and timing as in the drain) by 1, 2 and 4 relay instances in one child process, ", b.o.scaleEvents, b.o.aggregates)
	p("each with its own pool and sink, against a sink taking %s per message. Two sinks: ", b.o.scaleLatency)
	for i, s := range scaleSinks {
		if i > 0 {
			p("; ")
		}
		p("`%s` = %s", s.kind, s.desc)
	}
	p(". The first spends BatchSize-independent time (events × latency / instances); the second only the longest aggregate run of a batch, so the database side shows.\n\n")
	p("| sink | settings | instances | events/s | drain time | speed-up vs 1 instance | batches |\n|---|---|---:|---:|---:|---:|---:|\n")
	var targets []string
	for _, sink := range scaleSinks {
		for _, st := range settings {
			var base float64
			for _, n := range scaleInstances {
				s := relayShape{mode: relay.Ordered, instances: n, batchSize: st[0], maxPerAggregate: st[1]}
				res, err := b.relayDrain(ctx, s, relay.KeepThenDelete, b.o.scaleEvents, sink.kind, b.o.scaleLatency)
				if err != nil {
					return partReport{}, fmt.Errorf("%s, %s: %w", sink.kind, s, err)
				}
				e := eps(b.o.scaleEvents, res.Elapsed)
				if n == 1 {
					base = e
				}
				fmt.Fprintf(os.Stderr, "scale %-12s %-60s %8.0f events/s (×%.2f)\n", sink.kind, s, e, e/base)
				p("| %s | BatchSize %d, MaxPerAggregate %d | %d | %.0f | %.2f s | %.2f× | %d |\n", sink.kind, st[0], st[1], n, e, res.Elapsed.Seconds(), e/base, res.Stats.Batches)
			}
		}
	}
	return partReport{md: md.String(), targets: targets}, nil
}
