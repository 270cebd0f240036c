package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// bench holds what every part needs.
type bench struct {
	o     options
	pool  *pgxpool.Pool
	slots int // replication slots named so far (part cdc: one of its own per run)
}

// partReport is one part's markdown and its target lines.
type partReport struct {
	md      string
	targets []string
}

// Drain targets from the issue: relay events/s as a share of the limit's.
const (
	targetUnordered  = 0.70
	targetOrdered4   = 0.50
	drainInstancesHi = 4
	// targetColdOfWarm: relays started together on a backlog drain within 10% of the same
	// relays started before it.
	targetColdOfWarm = 0.90
)

// relayShape is one relay configuration of the drain.
type relayShape struct {
	mode                       relay.Mode
	instances                  int
	batchSize, maxPerAggregate int
	concurrency                int  // batches in flight per instance (Config.Concurrency); 0: the default
	jitOff                     bool // the relays' sessions run with jit = off
	cold                       bool // the relays start after the backlog is written, all at once
	aggregates                 int  // the backlog's aggregates; 0: -aggregates
	// beside: events of one aggregate of another type ("other") written after the
	// backlog, drained with it
	beside int
}

// drainShapes are the configurations of the main drain table.
func (b *bench) drainShapes() []relayShape {
	var out []relayShape
	for _, mode := range b.o.modes {
		for _, n := range []int{1, drainInstancesHi} {
			out = append(out, relayShape{mode: mode, instances: n, batchSize: b.o.batch, maxPerAggregate: b.o.maxPerAggregate})
		}
		if mode == relay.Ordered {
			// Scaling out onto a backlog: the relays start together once it is written,
			// and share the partitions while they drain it.
			out = append(out, relayShape{mode: mode, instances: drainInstancesHi, batchSize: b.o.batch, maxPerAggregate: b.o.maxPerAggregate, cold: true},
				// one batch at a time each: the default's alternative when several run
				relayShape{mode: mode, instances: drainInstancesHi, batchSize: b.o.batch, maxPerAggregate: b.o.maxPerAggregate, concurrency: 1})
		}
		if mode == relay.Unordered {
			// The default's alternatives: a lone relay running one batch at a time, and
			// each of several running two (the default shares two among them all).
			out = append(out, relayShape{mode: mode, instances: 1, batchSize: b.o.batch, concurrency: 1},
				relayShape{mode: mode, instances: drainInstancesHi, batchSize: b.o.batch, concurrency: 2})
		}
	}
	return out
}

func (s relayShape) String() string {
	inst := "1 instance"
	if s.instances > 1 {
		inst = fmt.Sprintf("%d instances", s.instances)
	}
	jit := ""
	if s.concurrency > 0 {
		jit = fmt.Sprintf(", Concurrency %d", s.concurrency)
	}
	if s.jitOff {
		jit += ", jit=off"
	}
	if s.cold {
		jit += ", started cold on the backlog"
	}
	if s.mode == relay.Unordered {
		return fmt.Sprintf("relay unordered, %s (BatchSize %d%s)", inst, s.batchSize, jit)
	}
	return fmt.Sprintf("relay ordered, %s (BatchSize %d, MaxPerAggregate %d%s)", inst, s.batchSize, s.maxPerAggregate, jit)
}

// drainConfig is the relay configuration of the drain and scale parts: claim as much as
// the settings allow and never poll while idle (the child wakes the relays with Wake
// once the backlog is in place).
//
// Relays started cold listen for notifications (the default wake-up), as relays an
// operator starts would: a relay's first heartbeat and its released leases notify the
// others, so the partitions are shared out as they start, not at the next lease round.
func drainConfig(s relayShape, ret relay.RetentionMode) relay.Config {
	c := relay.Config{
		Mode: s.mode, BatchSize: s.batchSize, MaxPerAggregate: s.maxPerAggregate, Concurrency: s.concurrency,
		Wakeup: relay.WakeupPoll, PollInterval: time.Minute,
		Retention: relay.Retention{Mode: ret},
	}
	if s.cold {
		c.Wakeup, c.FallbackPollInterval = relay.WakeupListen, time.Minute
	}
	return c
}

// relayDrain runs instances relays with cfg in a child on a fresh schema, fills the
// backlog of events while they idle, wakes them and returns the child's measurement.
func (b *bench) relayDrain(ctx context.Context, s relayShape, ret relay.RetentionMode, events int, sink string, latency time.Duration) (childResult, error) {
	cfg := drainConfig(s, ret)
	if err := resetForRelay(ctx, b.pool, cfg.Mode); err != nil {
		return childResult{}, err
	}
	c, err := startChild(ctx, childConfig{
		DSN: b.o.dsn, DB: b.o.database, Instances: s.instances, Relay: cfg, JITOff: s.jitOff, Cold: s.cold,
		Sink: sink, Latency: latency, Expect: int64(events + s.beside), CheckOrder: cfg.Mode == relay.Ordered,
	})
	if err != nil {
		return childResult{}, err
	}
	res, err := func() (childResult, error) {
		aggregates := b.o.aggregates
		if s.aggregates > 0 {
			aggregates = s.aggregates
		}
		if err := benchdb.Fill(ctx, b.pool, events, aggregates, false); err != nil {
			return childResult{}, err
		}
		if _, err := b.pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
			SELECT gen_random_uuid(), 'other', 'other', 'other.changed', '{}' FROM generate_series(1, $1::int)`, s.beside); err != nil {
			return childResult{}, fmt.Errorf("another type's backlog: %w", err)
		}
		if err := benchdb.Settle(ctx, b.pool); err != nil {
			return childResult{}, err
		}
		if err := c.send("GO"); err != nil {
			return childResult{}, err
		}
		return c.result()
	}()
	if err != nil {
		c.kill()
		return childResult{}, err
	}
	if res.OrderViolations > 0 {
		return res, fmt.Errorf("%d per-aggregate order violations", res.OrderViolations)
	}
	return res, b.checkDrained(ctx, cfg.Retention.Mode == relay.DeleteOnPublish, events+s.beside)
}

// resetForRelay migrates a fresh schema and records the relays' mode in relay_config
// before they start: relays starting at once on an empty relay_config race (one of them
// fails with "read relay_config: no rows in result set"; see the report).
func resetForRelay(ctx context.Context, pool *pgxpool.Pool, mode relay.Mode) error {
	return resetSchemaForRelay(ctx, pool, "outbox", mode)
}

// resetSchemaForRelay is resetForRelay for the outbox schema named schema.
func resetSchemaForRelay(ctx context.Context, pool *pgxpool.Pool, schema string, mode relay.Mode) error {
	if err := benchdb.ResetSchema(ctx, pool, schema); err != nil {
		return err
	}
	if mode == "" {
		mode = relay.Ordered
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.relay_config (mode, partitions) VALUES ($1, 16)`, string(mode)); err != nil {
		return fmt.Errorf("record %s.relay_config: %w", schema, err)
	}
	return nil
}

// checkDrained verifies that no event is pending and that the rows left match the
// retention mode.
func (b *bench) checkDrained(ctx context.Context, deleted bool, events int) error {
	var pending, rows int
	err := b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL AND dead_at IS NULL), count(*) FROM outbox.events`).Scan(&pending, &rows)
	if err != nil {
		return fmt.Errorf("check drained: %w", err)
	}
	want := events
	if deleted {
		want = 0
	}
	if pending != 0 || rows != want {
		return fmt.Errorf("after the drain: %d pending, %d rows (want 0 and %d)", pending, rows, want)
	}
	return nil
}

// limitColumns are the columns a relay reads (claim_unordered.sql).
const limitColumns = `seq, id, aggregate_type, aggregate_id, coalesce(aggregate_version, 0), event_type,
       schema_version, coalesce(topic, ''), headers, content_type,
       coalesce(convert_to(payload::text, 'UTF8'), payload_bytes), trace_parent, created_at, attempts`

// limitSQL is the plain-SQL limit's statement: the oldest available pending rows (as the
// relay takes them: a row in backoff waits), locked and marked published (or deleted) in
// one statement, returning what a relay reads. Without the availability filter the
// statement could not use events_pending (its predicate states available_at IS NOT NULL,
// migration 0003) and the keep modes' limit fell to a quarter.
func limitSQL(deleted bool) string {
	pick := `SELECT seq FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now() ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`
	if deleted {
		return `DELETE FROM outbox.events WHERE seq IN (` + pick + `) RETURNING ` + limitColumns
	}
	return `UPDATE outbox.events SET published_at = now() WHERE seq IN (` + pick + `) RETURNING ` + limitColumns
}

// limitDrain drains a fresh backlog with workers concurrent loops of limitSQL, batch
// rows per statement (autocommit), and returns how long it took.
func (b *bench) limitDrain(ctx context.Context, deleted bool, batch, workers int) (time.Duration, error) {
	if err := benchdb.ResetOutbox(ctx, b.pool); err != nil {
		return 0, err
	}
	if err := benchdb.Fill(ctx, b.pool, b.o.events, b.o.aggregates, false); err != nil {
		return 0, err
	}
	if err := benchdb.Settle(ctx, b.pool); err != nil {
		return 0, err
	}
	q := limitSQL(deleted)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for {
				rows, err := b.pool.Query(gctx, q, batch)
				if err != nil {
					return fmt.Errorf("limit statement: %w", err)
				}
				n := 0
				for rows.Next() {
					_ = rows.RawValues() // received, as a relay would
					n++
				}
				if err := rows.Err(); err != nil {
					return fmt.Errorf("limit statement: %w", err)
				}
				if n == 0 {
					return nil
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	return elapsed, b.checkDrained(ctx, deleted, b.o.events)
}

// limitTrial is one measurement of the plain-SQL limit.
type limitTrial struct {
	batch, workers int
	elapsed        time.Duration
}

// drainRun is one relay drain.
type drainRun struct {
	shape relayShape
	res   childResult
}

// drainRetention is what the drain measured for one retention mode.
type drainRetention struct {
	mode   relay.RetentionMode
	limits []limitTrial
	best   limitTrial
	relays []drainRun // drainShapes, then (first retention mode only) the ordered sweep
}

func eps(events int, d time.Duration) float64 { return float64(events) / d.Seconds() }

func (b *bench) drain(ctx context.Context) (partReport, error) {
	var rounds [][]drainRetention
	limitShapes := map[relay.RetentionMode]limitTrial{} // the limit's shape, chosen in round 1
	for round := range max(1, b.o.drainRounds) {
		var all []drainRetention
		for i, ret := range b.o.retentions {
			dr, err := b.drainOnce(ctx, ret, round == 0 && i == 0, limitShapes)
			if err != nil {
				return partReport{}, err
			}
			all = append(all, dr)
		}
		rounds = append(rounds, all)
	}
	return b.drainReport(rounds), nil
}

// drainOnce measures the limit and then every relay shape in retention mode ret; with
// sweep, the other ordered settings too. The first time for ret, it tries every limit
// shape (rows per statement × loops) and records the fastest in shapes; every time, the
// round's limit is one more trial of that shape, so each round compares one trial with
// one trial (the best of several noisy trials would be biased high).
func (b *bench) drainOnce(ctx context.Context, ret relay.RetentionMode, sweep bool, limitShapes map[relay.RetentionMode]limitTrial) (drainRetention, error) {
	dr := drainRetention{mode: ret}
	deleted := ret == relay.DeleteOnPublish
	trial := func(batch, workers int) (limitTrial, error) {
		d, err := b.limitDrain(ctx, deleted, batch, workers)
		if err != nil {
			return limitTrial{}, fmt.Errorf("%s limit, batch %d, %d loops: %w", ret, batch, workers, err)
		}
		fmt.Fprintf(os.Stderr, "%-17s limit batch %4d, %d loops: %8.0f events/s\n", ret, batch, workers, eps(b.o.events, d))
		t := limitTrial{batch, workers, d}
		dr.limits = append(dr.limits, t)
		return t, nil
	}
	if _, ok := limitShapes[ret]; !ok {
		var fastest limitTrial
		for _, batch := range b.o.limitBatches {
			for _, workers := range b.o.limitWorkers {
				t, err := trial(batch, workers)
				if err != nil {
					return dr, err
				}
				if fastest.elapsed == 0 || t.elapsed < fastest.elapsed {
					fastest = t
				}
			}
		}
		limitShapes[ret] = fastest
	}
	best, err := trial(limitShapes[ret].batch, limitShapes[ret].workers)
	if err != nil {
		return dr, err
	}
	dr.best = best
	shapes := b.drainShapes()
	if sweep && slices.Contains(b.o.modes, relay.Ordered) {
		shapes = append(shapes, b.sweepShapes()...)
	}
	for _, s := range shapes {
		res, err := b.relayDrain(ctx, s, ret, b.o.events, sinkMem, 0)
		if err != nil {
			return dr, fmt.Errorf("%s, %s: %w", ret, s, err)
		}
		dr.relays = append(dr.relays, drainRun{s, res})
		fmt.Fprintf(os.Stderr, "%-17s %-60s %8.0f events/s (%.0f%% of the limit), peak RSS %d MiB, %d batches, relay CPU %.0f%% of one core\n", ret, s,
			eps(b.o.events, res.Elapsed), 100*dr.best.elapsed.Seconds()/res.Elapsed.Seconds(), res.PeakRSSKiB>>10, res.Stats.Batches,
			100*res.CPU.Seconds()/res.Elapsed.Seconds())
	}
	return dr, nil
}

// sweepShapes are the other ordered settings tried (1 and 4 instances each), and every
// ordered setting again with jit = off in the relays' sessions.
func (b *bench) sweepShapes() []relayShape {
	var out []relayShape
	for _, jitOff := range []bool{false, true} {
		for _, st := range append([][2]int{{b.o.batch, b.o.maxPerAggregate}}, b.o.orderedSweep...) {
			if st == [2]int{b.o.batch, b.o.maxPerAggregate} && !jitOff {
				continue // in the main table
			}
			for _, n := range []int{1, drainInstancesHi} {
				out = append(out, relayShape{mode: relay.Ordered, instances: n, batchSize: st[0], maxPerAggregate: st[1], jitOff: jitOff})
			}
		}
	}
	return out
}

func (b *bench) drainReport(rounds [][]drainRetention) partReport {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Drain vs the plain-SQL limit\n\n")
	p("A backlog of %d events over %d aggregates (COPY into a freshly migrated schema, then `VACUUM ANALYZE` and a checkpoint) is drained ", b.o.events, b.o.aggregates)
	p("to an in-memory sink (`memsink`, its records reset after every call so it does not hold the backlog). ")
	p("Relay settings as named, Partitions 16, other settings default (Concurrency in unordered mode: 2 among all the instances, at least 1 each, on the child's pools of 8 connections — the relays count each other in `relay_members` before the backlog is filled; 1 in ordered mode); ")
	p("the relays run in a child process, each with its own pool, start before the fill, wait (Wakeup poll, PollInterval 1m) until ordered-mode leases are shared out, ")
	p("and are woken with `Relay.Wake` once the backlog is in place — except those \"started cold on the backlog\", which start together once it is in place, with no lease yet, as an operator scaling out onto a backlog does; ")
	p("the time runs until `Stats().Published` (counted after each batch commits) reaches the backlog. ")
	p("No per-aggregate order violation was seen in ordered runs (checked by the sink). ")
	p("The limit is the fastest shape of %s rows per statement × %s concurrent loops of one autocommit statement (the shape chosen by one trial of each in the first round; every round then measures that shape once more), ", joinInts(b.o.limitBatches, "/"), joinInts(b.o.limitWorkers, "/"))
	p("`UPDATE … SET published_at = now()` (keep modes) or `DELETE` (delete-on-publish) `WHERE seq IN (SELECT seq … WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now() ORDER BY seq LIMIT n FOR UPDATE SKIP LOCKED) RETURNING` the columns a relay reads (the availability filter, which the relay applies too, lets it use `events_pending` since migration 0003), ")
	p("on the same table, indexes and fill. Peak RSS is the relay child's VmHWM; relay CPU is the child's user and system CPU time over the drain time (100%% = one core of %d). ", runtime.NumCPU())
	p("The main table was measured in %d rounds, one after the other; each round measures the limit and then every relay again, per retention mode, ", len(rounds))
	p("and each relay's ratio is to its own round's limit. The table shows median events/s, every round's ratio and their median, on which the targets are judged ")
	p("(on this machine one drain's ratio swings 10–20 points from run to run).\n\n")
	p("| retention | configuration | events/s (median) | relay/limit, each round | relay/limit (median) | peak RSS (max) | relay CPU (median) | batches |\n|---|---|---:|---|---:|---:|---:|---:|\n")
	var targets []string
	main := len(b.drainShapes())
	first := rounds[0]
	for i, dr := range first {
		var limitEPS []float64
		for _, all := range rounds {
			limitEPS = append(limitEPS, eps(b.o.events, all[i].best.elapsed))
		}
		p("| %s | plain-SQL limit (%d rows, %d loops) | %.0f | %s events/s | 1.00 | | | |\n", dr.mode, dr.best.batch, dr.best.workers, benchreport.Median(limitEPS), joinFloats(limitEPS, "%.0f"))
		for j, r := range dr.relays[:main] {
			var rates, ratios, cpus []float64
			var rss int64
			for _, all := range rounds {
				run, lim := all[i].relays[j], all[i].best
				rates = append(rates, eps(b.o.events, run.res.Elapsed))
				ratios = append(ratios, lim.elapsed.Seconds()/run.res.Elapsed.Seconds())
				cpus = append(cpus, 100*run.res.CPU.Seconds()/run.res.Elapsed.Seconds())
				rss = max(rss, run.res.PeakRSSKiB)
			}
			ratio := benchreport.Median(ratios)
			p("| %s | %s | %.0f | %s | **%.2f** | %d MiB | %.0f%% | %d |\n", dr.mode, r.shape, benchreport.Median(rates), joinFloats(ratios, "%.2f"), ratio, rss>>10,
				benchreport.Median(cpus), r.res.Stats.Batches)
			if r.shape.cold {
				var cold []float64
				for _, all := range rounds {
					for _, warm := range all[i].relays[:main] {
						if warm.shape.mode == r.shape.mode && warm.shape.instances == r.shape.instances && !warm.shape.cold && warm.shape.concurrency == 0 && !warm.shape.jitOff {
							cold = append(cold, warm.res.Elapsed.Seconds()/all[i].relays[j].res.Elapsed.Seconds())
						}
					}
				}
				c := benchreport.Median(cold)
				targets = append(targets, fmt.Sprintf("Drain, %s, %s ≥ %.0f%% of the same relays started warm (median of %d rounds; each round %s): %s — %.0f%%.", dr.mode, r.shape, targetColdOfWarm*100, len(rounds), joinFloats(cold, "%.2f"), benchreport.Met(c >= targetColdOfWarm), c*100))
			}
			want := 0.0
			switch {
			case r.shape.mode == relay.Unordered && r.shape.concurrency == 0: // the default; the others are diagnostics
				want = targetUnordered
			case r.shape.mode == relay.Ordered && r.shape.instances == drainInstancesHi:
				want = targetOrdered4
			}
			if want > 0 {
				targets = append(targets, fmt.Sprintf("Drain, %s, %s ≥ %.0f%% of the limit (median of %d rounds): %s — %.0f%%.", dr.mode, r.shape, want*100, len(rounds), benchreport.Met(ratio >= want), ratio*100))
			}
		}
	}
	if len(first) > 0 && len(first[0].relays) > main {
		dr := first[0]
		p("\nOther ordered settings, and every ordered setting with `jit = off` in the relays' sessions (a diagnostic: the server default is jit = on; %s, first round only, against that round's limit):\n\n", dr.mode)
		p("| retention | configuration | events/s | drain time | relay/limit | peak RSS | relay CPU | batches |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range dr.relays[main:] {
			ratio := eps(b.o.events, r.res.Elapsed) / eps(b.o.events, dr.best.elapsed)
			p("| %s | %s | %.0f | %.2f s | %.2f | %d MiB | %.0f%% | %d |\n", dr.mode, r.shape, eps(b.o.events, r.res.Elapsed), r.res.Elapsed.Seconds(), ratio, r.res.PeakRSSKiB>>10,
				100*r.res.CPU.Seconds()/r.res.Elapsed.Seconds(), r.res.Stats.Batches)
			if r.shape.instances == drainInstancesHi && !r.shape.jitOff {
				targets = append(targets, fmt.Sprintf("Drain, %s, %s ≥ %.0f%% of the limit (other setting, one round): %s — %.0f%%.", dr.mode, r.shape, targetOrdered4*100, benchreport.Met(ratio >= targetOrdered4), ratio*100))
			}
		}
	}
	p("\nEvery limit trial (events/s; in round 1 the last trial of each mode is the chosen shape again):\n\n| round | retention | rows per statement | loops | events/s |\n|---:|---|---:|---:|---:|\n")
	for k, all := range rounds {
		for _, dr := range all {
			for _, t := range dr.limits {
				p("| %d | %s | %d | %d | %.0f |\n", k+1, dr.mode, t.batch, t.workers, eps(b.o.events, t.elapsed))
			}
		}
	}
	return partReport{md: md.String(), targets: targets}
}

func joinFloats(xs []float64, format string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, " ")
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}
