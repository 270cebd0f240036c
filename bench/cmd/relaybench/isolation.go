package main

// The isolation part: one aggregate's trouble must stay its own. A steady trickle of
// events is measured (commit → sink, as in the latency part) in a control run and in
// runs where something else troubles the relay meanwhile — a type flooding the table,
// an aggregate with a deep backlog, one of its messages held by the sink — and the
// trickle's p99 while the trouble lasts is compared with the control's. The drain part
// of it measures claim shapes that used to degenerate (MaxPerAggregate 1 on one deep
// aggregate; MaxPerAggregate 1, 10 and 200 over many aggregates).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// Targets of the isolation part (issue 14).
const (
	// targetTroubleP99: the trickle's p99 while the trouble lasts, against its control's.
	targetTroubleP99 = 2.0
	// targetOneDeepRate: MaxPerAggregate 1 on one aggregate's backlog, events/s.
	targetOneDeepRate = 200
	// targetClaimCycle: the same drain's time per claim.
	targetClaimCycle = 5 * time.Millisecond
	// targetShapeSpread: MaxPerAggregate 1, 10 and 200 over many aggregates, the fastest
	// drain against the slowest.
	targetShapeSpread = 2.0

	// stallEventType marks the one message the stalling sink holds.
	stallEventType = "stall"
	// isolationLead is how long the trickle runs before the trouble starts.
	isolationLead = 2 * time.Second
	// floodSchema holds the flood of troubleFloodUnread and troubleFloodApart.
	floodSchema = "outbox_flood"
	// floodRelayApp is the application_name of troubleFloodApart's relays: their
	// backends count among the other backends, not the trickle's relays'.
	floodRelayApp = "relaybench flood relay"
)

// isolationTrouble is what troubles the relay while the trickle runs.
type isolationTrouble string

const (
	troubleNone  isolationTrouble = "none"  // the control
	troubleFlood isolationTrouble = "flood" // a type flooding the table
	// troubleFloodUnread: the same flood written into another outbox schema
	// (floodSchema), which no relay reads: what the flood's writes alone cost the machine
	troubleFloodUnread isolationTrouble = "flood unread"
	// troubleFloodApart: the same flood written into floodSchema, drained by relays of
	// their own (as many, in a second child process): the trickle's relays and the
	// flood's share nothing but the machine. The reference for isolation inside the
	// relays: what the flood's drain costs the trickle through the machine alone
	troubleFloodApart isolationTrouble = "flood apart"
	troubleHot        isolationTrouble = "hot"   // one aggregate's deep backlog
	troubleStall      isolationTrouble = "stall" // the same, one of its messages held by the sink
)

// isolationCase is one run: a relay set-up, a trickle, and a trouble.
type isolationCase struct {
	key      string // names the scenario in -isolation-scenarios
	scenario string // the scenario the case belongs to (its control shares it)
	trouble  isolationTrouble
	relays   int
	// trickle: its aggregate type and how many aggregates it spreads over, at rate
	// events/s
	trickleType       string
	trickleAggregates int
	rate              int
}

func (c isolationCase) String() string {
	return fmt.Sprintf("%s, trouble %s", c.scenario, c.trouble)
}

// isolationScenarios returns the cases of one round: each scenario's control, then its
// troubled runs.
func (b *bench) isolationScenarios() []isolationCase {
	var out []isolationCase
	for _, n := range []int{1, 4} {
		sc := fmt.Sprintf("noisy neighbour, %d relay(s)", n)
		quiet := isolationCase{key: fmt.Sprintf("flood%d", n), scenario: sc, relays: n, trickleType: "quiet", trickleAggregates: 50, rate: 50}
		for _, t := range []isolationTrouble{troubleNone, troubleFloodUnread, troubleFloodApart, troubleFlood} {
			quiet.trouble = t
			out = append(out, quiet)
		}
	}
	small := isolationCase{key: "hot", scenario: "hot aggregate, slow publish", relays: 1, trickleType: "order", trickleAggregates: b.o.aggregates, rate: 200}
	for _, t := range []isolationTrouble{troubleNone, troubleHot, troubleStall} {
		small.trouble = t
		out = append(out, small)
	}
	return slices.DeleteFunc(out, func(c isolationCase) bool { return !slices.Contains(b.o.isolationScenarios, c.key) })
}

// isolationScenarioKeys are the keys of -isolation-scenarios: the noisy neighbour with 1
// and 4 relays, the hot aggregate and its stall, the claim shapes.
var isolationScenarioKeys = []string{"flood1", "flood4", "hot", "shapes"}

// isolationBases are the troubles a run of trouble t is compared with, in its scenario
// and round: the control, and for the flood the same flood unread and apart, for the
// stall the hot aggregate without it.
func isolationBases(t isolationTrouble) []isolationTrouble {
	switch t {
	case troubleFlood:
		return []isolationTrouble{troubleNone, troubleFloodUnread, troubleFloodApart}
	case troubleFloodUnread, troubleFloodApart, troubleHot:
		return []isolationTrouble{troubleNone}
	case troubleStall:
		return []isolationTrouble{troubleHot}
	}
	return nil
}

// isolationReference says what the ratio of a run of trouble t against one of base
// shows, when that ratio is no target ("": a target).
func isolationReference(t, base isolationTrouble) string {
	switch {
	case t == troubleFloodUnread:
		return "what the flood's writes alone cost the trickle"
	case t == troubleFloodApart:
		return "what the flood, written and drained by relays of its own, costs the trickle through the machine alone: the reference for isolation inside the relays"
	case base == troubleFloodUnread:
		return "what draining the flood adds to its writes"
	case base == troubleFloodApart:
		return "what sharing the relays and the table with the flood adds to sharing the machine"
	}
	return ""
}

// isolationResult is what one case measured.
type isolationResult struct {
	c     isolationCase
	round int
	// all: the trickle's latencies after the lead; during: those of the events committed
	// while the trouble lasted (the control: all)
	all, during []time.Duration
	// txDuring: the trickle's own transactions (BEGIN to the end of COMMIT) of during:
	// what the machine's load did to the producer itself
	txDuring []time.Duration
	// afterDuring: the latencies of during counted from the end of COMMIT, not from
	// before it: the relay's part of them, without the commit's own wait
	afterDuring []time.Duration
	// troubleTime: from the trouble's first commit until its last event was published
	troubleTime time.Duration
	troubleSize int
	claims      int64
	// cpu: how busy each role kept the machine over the window of during (the control:
	// from the lead to the trickle's end)
	cpu cpuShares
}

func (b *bench) isolation(ctx context.Context) (partReport, error) {
	var (
		results []isolationResult
		shapes  []shapeResult
	)
	for round := 1; round <= b.o.isolationRounds; round++ {
		for _, c := range b.isolationScenarios() {
			res, err := b.isolationRun(ctx, c)
			if err != nil {
				return partReport{}, fmt.Errorf("%s: %w", c, err)
			}
			res.round = round
			fmt.Fprintf(os.Stderr, "isolation round %d %-60s p50 %7.2f p99 %8.2f ms during (all %7.2f; tx p99 %6.2f; from COMMIT's end p99 %6.2f), trouble %d events in %s, CPU %% relays' backends / relay process / other backends / bench (machine) %s\n", round, c,
				ms(percentile(res.during, 50)), ms(percentile(res.during, 99)), ms(percentile(res.all, 99)), ms(percentile(res.txDuring, 99)), ms(percentile(res.afterDuring, 99)),
				res.troubleSize, res.troubleTime.Round(time.Millisecond), res.cpu)
			results = append(results, res)
		}
		if slices.Contains(b.o.isolationScenarios, "shapes") {
			s, err := b.isolationShapes(ctx, round)
			if err != nil {
				return partReport{}, err
			}
			shapes = append(shapes, s...)
		}
	}
	return b.isolationReport(results, shapes), nil
}

// isolationRun runs one case: a relay child with the recording sink, the trickle for
// -latency-duration and, after isolationLead, the trouble.
func (b *bench) isolationRun(ctx context.Context, c isolationCase) (isolationResult, error) {
	if err := resetForRelay(ctx, b.pool, relay.Ordered); err != nil {
		return isolationResult{}, err
	}
	dir, err := os.MkdirTemp("", "relaybench-")
	if err != nil {
		return isolationResult{}, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	receipts := filepath.Join(dir, "receipts")
	sink, hold := sinkRecord, time.Duration(0)
	if c.trouble == troubleStall {
		sink, hold = sinkRecordStall, b.o.isolationStall
	}
	cc := childConfig{
		DSN: b.o.dsn, DB: b.o.database, Instances: c.relays, Sink: sink, Latency: hold, Receipts: receipts,
		Relay: relay.Config{
			ClaimCooldown: b.o.isolationCooldown, BatchSize: b.o.isolationBatch, Concurrency: b.o.isolationWorkers, IsolatedTypes: b.o.isolationIsolated,
			TypeRates: b.o.isolationRates,
			Retention: relay.Retention{Mode: relay.RetentionMode(b.o.isolationRetention)},
		},
	}
	if c.trouble == troubleFloodUnread || c.trouble == troubleFloodApart {
		if err := resetSchemaForRelay(ctx, b.pool, floodSchema, relay.Ordered); err != nil {
			return isolationResult{}, err
		}
	}
	// every run starts from a checkpoint: one forced by the WAL of the runs before would
	// otherwise land inside some runs and not others
	if _, err := b.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return isolationResult{}, fmt.Errorf("checkpoint: %w", err)
	}
	if c.trouble == troubleFloodApart {
		apart := cc
		apart.Relay.Schema, apart.AppName, apart.Sink, apart.Latency, apart.Receipts = floodSchema, floodRelayApp, sinkRecord, 0, filepath.Join(dir, "flood-receipts")
		// its schema holds the flood alone: no lanes, and the default Concurrency, as one
		// relay per process follows a flood (the trickle's own -isolation-concurrency is
		// what its lanes need)
		apart.Relay.IsolatedTypes, apart.Relay.Concurrency, apart.Relay.TypeRates = nil, 0, nil
		floodChild, err := startChild(ctx, apart)
		if err != nil {
			return isolationResult{}, fmt.Errorf("the flood's relays: %w", err)
		}
		defer func() {
			if err := floodChild.send("STOP"); err != nil {
				floodChild.kill()
				return
			}
			_, _ = floodChild.result()
		}()
	}
	child, err := startChild(ctx, cc)
	if err != nil {
		return isolationResult{}, err
	}
	res, err := b.isolationMeasure(ctx, c, child, receipts)
	if err != nil {
		child.kill()
	}
	return res, err
}

func (b *bench) isolationMeasure(ctx context.Context, c isolationCase, child *child, receipts string) (isolationResult, error) {
	notifier, err := outbox.NewNotifier(b.pool, nil)
	if err != nil {
		return isolationResult{}, fmt.Errorf("new notifier: %w", err)
	}
	defer notifier.Close()
	var (
		troubleStart, troubleEnd time.Time
		troubleSize              int
		cpuFrom, cpuTo           cpuMark
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := sleepCtx(gctx, isolationLead); err != nil {
			return err
		}
		var err error
		if cpuFrom, err = markCPU(gctx, b.pool, child.cmd.Process.Pid); err != nil {
			return err
		}
		if c.trouble == troubleNone {
			return nil
		}
		troubleStart, troubleSize, err = b.trouble(gctx, c.trouble, notifier)
		if err != nil {
			return err
		}
		if troubleEnd, err = b.waitTroubleDrained(gctx, c.trouble); err != nil {
			return err
		}
		cpuTo, err = markCPU(gctx, b.pool, child.cmd.Process.Pid)
		return err
	})
	var (
		produced production
		began    time.Time
	)
	g.Go(func() error {
		total := int(float64(c.rate) * b.o.latencyDuration.Seconds())
		began = time.Now()
		var err error
		produced, err = b.runProducer(gctx, total, time.Second/time.Duration(c.rate), 4, func(ctx context.Context, tx pgx.Tx, id uuid.UUID, rng *rand.Rand) error {
			return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
				ID: id, AggregateType: c.trickleType, AggregateID: fmt.Sprintf("%s-%d", c.trickleType, rng.IntN(c.trickleAggregates)),
				EventType: c.trickleType + ".changed", Payload: []byte(`{"trickle":true}`),
			})
		}, notifier.AfterCommit)
		return err
	})
	if err := g.Wait(); err != nil {
		return isolationResult{}, err
	}
	if c.trouble == troubleNone {
		if cpuTo, err = markCPU(ctx, b.pool, child.cmd.Process.Pid); err != nil {
			return isolationResult{}, err
		}
	}
	if err := b.waitNonePending(ctx); err != nil {
		return isolationResult{}, err
	}
	cr, got, err := child.stopWithReceipts(receipts)
	if err != nil {
		return isolationResult{}, err
	}
	res := isolationResult{c: c, troubleSize: troubleSize, claims: cr.Stats.Claims, cpu: cpuFrom.until(cpuTo)}
	from, to := began.Add(isolationLead).UnixNano(), int64(1<<63-1)
	if c.trouble != troubleNone {
		from, to = troubleStart.UnixNano(), troubleEnd.UnixNano()
		res.troubleTime = troubleEnd.Sub(troubleStart)
	}
	for i, id := range produced.ids {
		at, ok := got[id]
		if !ok {
			return isolationResult{}, fmt.Errorf("event %s was committed but never reached the sink", id)
		}
		commit := produced.commits[i]
		if commit < began.Add(isolationLead).UnixNano() {
			continue
		}
		lat := time.Duration(at - commit)
		res.all = append(res.all, lat)
		if commit >= from && commit <= to {
			res.during = append(res.during, lat)
			res.txDuring = append(res.txDuring, produced.txs[i])
			res.afterDuring = append(res.afterDuring, time.Duration(at-produced.committed[i]))
		}
	}
	for _, d := range [][]time.Duration{res.all, res.during, res.txDuring, res.afterDuring} {
		slices.Sort(d)
	}
	if len(res.during) == 0 {
		return isolationResult{}, fmt.Errorf("no trickle event was committed while the trouble lasted (%s)", res.troubleTime)
	}
	return res, nil
}

// trouble writes the trouble's events and returns when its first commit began and how
// many events it wrote:
//   - flood: -isolation-flood events of type "flood" over 1,000 aggregates, in
//     transactions of 100 events through Enqueue on 4 connections, spread over
//     -isolation-flood-time (flood unread, flood apart: into floodSchema);
//   - hot, stall: -isolation-hot events of one aggregate, in one statement (stall: the
//     100th is the one the sink holds).
func (b *bench) trouble(ctx context.Context, t isolationTrouble, notifier *outbox.Notifier) (time.Time, int, error) {
	began := time.Now()
	switch t {
	case troubleFlood, troubleFloodUnread, troubleFloodApart:
		const perTx, writers = 100, 4
		enqueue, wake := outbox.Enqueue, notifier.AfterCommit
		if t != troubleFlood {
			writer, err := outbox.NewWriter(&outbox.WriterConfig{Schema: floodSchema})
			if err != nil {
				return began, 0, err
			}
			enqueue = writer.Enqueue
			n, err := outbox.NewNotifier(b.pool, &outbox.NotifierConfig{Schema: floodSchema})
			if err != nil {
				return began, 0, err
			}
			defer n.Close()
			wake = n.AfterCommit
		}
		began = time.Now()
		txs := b.o.isolationFlood / perTx
		interval := b.o.isolationFloodTime / time.Duration(txs)
		var next sync.Mutex
		k := 0
		g, gctx := errgroup.WithContext(ctx)
		for range writers {
			g.Go(func() error {
				for {
					next.Lock()
					i := k
					k++
					next.Unlock()
					if i >= txs {
						return nil
					}
					if d := time.Until(began.Add(time.Duration(i) * interval)); d > 0 {
						if err := sleepCtx(gctx, d); err != nil {
							return err
						}
					}
					events := make([]outbox.Event, perTx)
					for j := range events {
						events[j] = outbox.Event{AggregateType: "flood", AggregateID: fmt.Sprintf("flood-%d", (i*perTx+j)%1000), EventType: "flood.changed", Payload: []byte(`{"flood":true}`)}
					}
					if err := outbox.WithTx(gctx, b.pool, func(tx pgx.Tx) error { return enqueue(gctx, outbox.PgxTx(tx), events...) }, wake); err != nil {
						return fmt.Errorf("flood: %w", err)
					}
				}
			})
		}
		return began, txs * perTx, g.Wait()
	case troubleHot, troubleStall:
		stall := int64(0)
		if t == troubleStall {
			stall = 100
		}
		_, err := b.pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			SELECT gen_random_uuid(), 'order', 'hot', g, CASE WHEN g = $2 THEN $3 ELSE 'order.changed' END, '{"hot":true}'
			FROM generate_series(1, $1::int) g`, b.o.isolationHot, stall, stallEventType)
		if err != nil {
			return began, 0, fmt.Errorf("hot backlog: %w", err)
		}
		notifier.AfterCommit(ctx)
		return began, b.o.isolationHot, nil
	}
	return began, 0, fmt.Errorf("unknown trouble %q", t)
}

// waitTroubleDrained waits until no event of the trouble is pending and returns when it
// saw that (a probe of events_pending_aggregate every 20 ms).
func (b *bench) waitTroubleDrained(ctx context.Context, t isolationTrouble) (time.Time, error) {
	if t == troubleFloodUnread {
		return time.Now(), nil // written: nothing drains it
	}
	schema, typ, id := "outbox", "flood", ""
	switch t {
	case troubleFloodApart:
		schema = floodSchema
	case troubleHot, troubleStall:
		typ, id = "order", "hot"
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var pending bool
		err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+schema+`.events
			WHERE published_at IS NULL AND dead_at IS NULL AND aggregate_type = $1 AND ($2 = '' OR aggregate_id = $2))`, typ, id).Scan(&pending)
		if err != nil {
			return time.Time{}, fmt.Errorf("wait for the trouble to drain: %w", err)
		}
		if !pending {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the %s trouble was not drained after 5 minutes", t)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// waitNonePending waits until no event is pending.
func (b *bench) waitNonePending(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var pending bool
		if err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL)`).Scan(&pending); err != nil {
			return fmt.Errorf("wait for the relay: %w", err)
		}
		if !pending {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("events still pending after 5 minutes")
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// shapeResult is one drain of the claim-shape table.
type shapeResult struct {
	round                      int
	what                       string
	events, aggregates, maxPer int
	beside                     int // events of another type's one aggregate, drained with them
	res                        childResult
}

// isolationShapes drains the claim shapes that used to degenerate: one aggregate's
// -isolation-hot events at MaxPerAggregate 1, and -scale-events events over
// -aggregates aggregates at MaxPerAggregate 1, 10 and 200 (BatchSize 100, the default),
// once for the given round.
func (b *bench) isolationShapes(ctx context.Context, round int) ([]shapeResult, error) {
	runs := []shapeResult{{round: round, what: "one aggregate", events: b.o.isolationHot, aggregates: 1, maxPer: 1}}
	for _, m := range []int{1, 10, 200} {
		runs = append(runs, shapeResult{round: round, what: "many aggregates", events: b.o.scaleEvents, aggregates: b.o.aggregates, maxPer: m})
	}
	// the same beside one aggregate of another type with a backlog of its own: it needs
	// one head of each claim, and leaves the rest of its share to the many (ADR 0034)
	runs = append(runs, shapeResult{round: round, what: "many aggregates, beside another type's one", events: b.o.scaleEvents, aggregates: b.o.aggregates, maxPer: 10, beside: b.o.scaleEvents / 100})
	for i, r := range runs {
		s := relayShape{mode: relay.Ordered, instances: 1, batchSize: 100, maxPerAggregate: r.maxPer, aggregates: r.aggregates, beside: r.beside}
		res, err := b.relayDrain(ctx, s, relay.KeepThenDelete, r.events, sinkMem, 0)
		if err != nil {
			return nil, fmt.Errorf("claim shape %s: %w", s, err)
		}
		runs[i].res = res
		fmt.Fprintf(os.Stderr, "isolation round %d shape %-42s %6d events, %4d aggregates, MaxPerAggregate %3d: %8.0f events/s, %5d claims, %.2f ms a claim\n",
			round, r.what, r.events+r.beside, r.aggregates, r.maxPer, eps(r.events+r.beside, res.Elapsed), res.Stats.Claims, ms(res.Elapsed)/float64(max(res.Stats.Claims, 1)))
	}
	return runs, nil
}

func (b *bench) isolationReport(results []isolationResult, shapes []shapeResult) partReport {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Isolation: one aggregate's trouble stays its own\n\n")
	p("A producer commits a trickle of events, one per transaction (`outbox.Enqueue` through 4 connections, `Notifier.AfterCommit` after each), for %s; ", b.o.latencyDuration)
	p("relays with default settings (ordered, BatchSize 100, MaxPerAggregate 10, listening) run in a child process with a sink that records when each message arrives. ")
	if b.o.isolationRetention != "" {
		p("The relays' retention mode: %s. ", b.o.isolationRetention)
	}
	if b.o.isolationWorkers != 0 {
		p("The relays' Concurrency: %d. ", b.o.isolationWorkers)
	}
	if len(b.o.isolationIsolated) > 0 {
		p("The relays' IsolatedTypes (the trickle's relays only): %s. ", strings.Join(b.o.isolationIsolated, ", "))
	}
	if len(b.o.isolationRates) > 0 {
		p("The relays' TypeRates (the trickle's relays only; events a second, the relays together): %v. ", b.o.isolationRates)
	}
	p("Latency runs from just before the trickle's COMMIT to the sink, as in the latency part. %s after the trickle starts, the trouble starts: ", isolationLead)
	p("**flood**: %d events of type `flood` over 1,000 aggregates, 100 a transaction through `Enqueue` on 4 connections, over %s, while the trickle is type `quiet` at 50 events/s over 50 aggregates; ", b.o.isolationFlood, b.o.isolationFloodTime)
	p("**flood unread**: the same flood written into another outbox schema, which no relay reads (what the flood's writes cost the machine); **flood apart**: the same, drained by as many relays of its own (with the default Concurrency) in a second child process (the trickle's relays and the flood's share only the machine: what the flood's drain costs the trickle through the machine alone, the reference for isolation inside the relays; their backends count among the other backends, their process only in the machine's total); ")
	p("**hot**: one aggregate's %d events in one statement, while the trickle is 200 events/s over %d other aggregates; ", b.o.isolationHot, b.o.aggregates)
	p("**stall**: the same, and the sink holds the hot aggregate's 100th message for %s (its later messages wait behind it, as a pipelining broker client's would; the other aggregates of the same Publish call are received at once). ", b.o.isolationStall)
	p("Every run starts from a `CHECKPOINT`. ")
	p("\"During\" counts the trickle events committed from the trouble's first commit until its last event was published (the control: every event after the first %s); the ratio is a run's p99 during its trouble against the p99 of its scenario's control in the same round (stall: against the hot run's). ", isolationLead)
	p("Milliseconds:\n\n")
	p("The trickle's own transactions (BEGIN to the end of COMMIT) are shown too: the commit is inside the latency, and what the trouble's writes cost the machine shows there first. ")
	p("So is the p99 counted from the end of COMMIT: the relay's part of the latency (the wake-up, the claim, the publish), without the commit's own wait (not a target). ")
	p("The CPU column says how busy each part kept the machine while the trouble lasted (the control: from the lead to the trickle's end), in percent of all its CPUs, from `/proc`: the relays' server backends (their claims, commits and the rest) / the relay process / the other backends of the database (the producers') / this program (the producers) (the whole machine, busy, as the kernel samples it on its clock tick: it can read below the sum for a trickle's short bursts). It shows where a trouble's cost lands, which the latencies alone do not (not a target).\n\n")
	p("| round | scenario | trouble | trouble events | trouble lasted | trickle events during | p50 during | p99 during | p99 whole run | max during | trickle tx p99 during | p99 from COMMIT's end during | claims | CPU %% during | p99 ratio |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	type key struct {
		round    int
		scenario string
		trouble  isolationTrouble
	}
	byKey := map[key]isolationResult{}
	for _, r := range results {
		byKey[key{r.round, r.c.scenario, r.c.trouble}] = r
	}
	ratios := map[string][]float64{}
	afterRatios := map[string][]float64{} // the same from the end of COMMIT
	references := map[string]string{}     // the ratios that are no target: what they show
	var order []string
	for _, r := range results {
		var cells []string
		for _, base := range isolationBases(r.c.trouble) {
			ctl, ok := byKey[key{r.round, r.c.scenario, base}]
			if !ok {
				continue
			}
			x := float64(percentile(r.during, 99)) / float64(percentile(ctl.during, 99))
			cells = append(cells, fmt.Sprintf("%.2f (%s)", x, base))
			name := fmt.Sprintf("%s, %s against %s", r.c.scenario, r.c.trouble, base)
			if _, seen := ratios[name]; !seen {
				order = append(order, name)
				references[name] = isolationReference(r.c.trouble, base)
			}
			ratios[name] = append(ratios[name], x)
			afterRatios[name] = append(afterRatios[name], float64(percentile(r.afterDuring, 99))/float64(percentile(ctl.afterDuring, 99)))
		}
		ratio := strings.Join(cells, ", ")
		lasted := ""
		if r.troubleTime > 0 {
			lasted = fmt.Sprintf("%.2f s", r.troubleTime.Seconds())
		}
		p("| %d | %s | %s | %d | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %s | %s |\n", r.round, r.c.scenario, r.c.trouble, r.troubleSize, lasted, len(r.during),
			ms(percentile(r.during, 50)), ms(percentile(r.during, 99)), ms(percentile(r.all, 99)), ms(r.during[len(r.during)-1]), ms(percentile(r.txDuring, 99)),
			ms(percentile(r.afterDuring, 99)), r.claims, r.cpu, ratio)
	}
	var targets []string
	for _, name := range order {
		m := medianFloat(ratios[name])
		if ref := references[name]; ref != "" {
			p("\n%s: the trickle's p99 %.2f × (median of %d rounds: %s; not a target: %s).", name, m, len(ratios[name]), joinFloats(ratios[name], "%.2f"), ref)
			continue
		}
		targets = append(targets, fmt.Sprintf("Isolation, %s: trickle p99 during the trouble ≤ %.0f × (median of %d rounds): %s — %.2f × (rounds: %s).",
			name, targetTroubleP99, len(ratios[name]), benchreport.Met(m <= targetTroubleP99), m, joinFloats(ratios[name], "%.2f")))
		p("\n%s: the p99 from the end of COMMIT %.2f × (median of %d rounds: %s; not a target: the relay's part, without the commit's own wait).",
			name, benchreport.Median(afterRatios[name]), len(afterRatios[name]), joinFloats(afterRatios[name], "%.2f"))
	}
	for _, r := range results {
		if r.c.trouble == troubleHot && r.troubleTime > 0 {
			p("\nRound %d: the hot aggregate's %d events drained at %.0f events/s beside the trickle.", r.round, r.troubleSize, float64(r.troubleSize)/r.troubleTime.Seconds())
		}
	}
	p("\n\n#### Claim shapes\n\n")
	p("A backlog written while one relay idles (COPY, `VACUUM ANALYZE`, then woken), drained to an in-memory sink; ordered, BatchSize 100, the MaxPerAggregate given; every shape once a round. A claim's time is the drain's time over its claim transactions.\n\n")
	p("| round | backlog | events | aggregates | MaxPerAggregate | events/s | claims | ms a claim |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	var (
		deepRates, deepCycles []float64                              // one aggregate's, by round
		lo, hi                = map[int]float64{}, map[int]float64{} // by round: slowest and fastest of the MaxPerAggregate shapes
	)
	for _, s := range shapes {
		e := eps(s.events+s.beside, s.res.Elapsed)
		cycle := s.res.Elapsed / time.Duration(max(s.res.Stats.Claims, 1))
		p("| %d | %s | %d | %d | %d | %.0f | %d | %.2f |\n", s.round, s.what, s.events+s.beside, s.aggregates+min(s.beside, 1), s.maxPer, e, s.res.Stats.Claims, ms(cycle))
		switch {
		case s.beside > 0: // not one of the MaxPerAggregate shapes the target compares
		case s.aggregates == 1:
			deepRates, deepCycles = append(deepRates, e), append(deepCycles, ms(cycle))
		default:
			if l, ok := lo[s.round]; !ok || e < l {
				lo[s.round] = e
			}
			hi[s.round] = max(hi[s.round], e)
		}
	}
	if len(deepRates) > 0 {
		rate, cycle := benchreport.Median(deepRates), benchreport.Median(deepCycles)
		targets = append(targets, fmt.Sprintf("Isolation, MaxPerAggregate 1 on one aggregate's %d events ≥ %d events/s and ≤ %s a claim (median of %d rounds): %s — %.0f events/s, %.2f ms a claim (rounds: %s events/s).",
			b.o.isolationHot, targetOneDeepRate, targetClaimCycle, len(deepRates), benchreport.Met(rate >= targetOneDeepRate && cycle <= ms(targetClaimCycle)), rate, cycle, joinFloats(deepRates, "%.0f")))
	}
	var spreads []float64
	for round := 1; round <= b.o.isolationRounds; round++ {
		if lo[round] > 0 {
			spreads = append(spreads, hi[round]/lo[round])
		}
	}
	if len(spreads) > 0 {
		m := benchreport.Median(spreads)
		targets = append(targets, fmt.Sprintf("Isolation, MaxPerAggregate 1, 10 and 200 over %d aggregates drain within %.0f × of each other (fastest / slowest in a round, median of %d rounds): %s — %.2f (rounds: %s).",
			b.o.aggregates, targetShapeSpread, len(spreads), benchreport.Met(m <= targetShapeSpread), m, joinFloats(spreads, "%.2f")))
	}
	p("\n")
	return partReport{md: md.String(), targets: targets}
}
