package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// Latency target from the issue: p99 on the default path at the lowest rate.
const (
	targetLatencyP99  = 10 * time.Millisecond
	targetLatencyRate = 500
	producerWorkers   = 16
	// targetVsLoop: the default path's p99 against the plain-SQL follow loop's, same run.
	targetVsLoop = 0.8
	// targetProducerTx: the producer's tx p99 with the relay running against alone.
	targetProducerTx = 1.2
)

// wakePath is one way events get from the producer's commit to the sink: a relay and
// how it learns of new events, the plain-SQL follow loop, or nothing (the producer
// alone, for its own transaction times).
type wakePath struct {
	name        string
	key         string // names the path in -latency-paths
	notifier    bool   // the producer calls a Notifier's AfterCommit after each commit
	trigger     bool   // the NOTIFY trigger is installed
	wakeup      relay.Wakeup
	poll        time.Duration // 0: the relay's default PollInterval
	cooldown    time.Duration // the relay's ClaimCooldown; 0: the default
	concurrency int           // the relay's Concurrency; 0: the default
	loop        time.Duration // > 0: the plain-SQL follow loop polling this often, not a relay
	none        bool          // no relay: the producer alone
	cdc         bool          // a cdc.Source beside the relay, on a slot of its own (part cdc)
	// tableless: the producer writes with outbox.Writer.Emit, read from the path's slot
	// (cdc set): no rows
	tableless bool
}

// loopPath is the peer every relay path is compared with.
var loopPath = wakePath{name: "plain-SQL follow loop, 10ms poll", key: "loop", loop: 10 * time.Millisecond}

var wakePaths = []wakePath{
	{name: "no relay (the producer alone)", key: "alone", none: true},
	loopPath,
	{name: "default: Notifier after commit + LISTEN", key: "default", notifier: true, wakeup: relay.WakeupListen},
	{name: "default without the claim cooldown", key: "nocooldown", notifier: true, wakeup: relay.WakeupListen, cooldown: -1},
	{name: "default, Concurrency 1", key: "c1", notifier: true, wakeup: relay.WakeupListen, concurrency: 1},
	{name: "NOTIFY trigger + LISTEN", key: "trigger", trigger: true, wakeup: relay.WakeupListen},
	{name: "NOTIFY trigger without the claim cooldown", key: "trigger-nocooldown", trigger: true, wakeup: relay.WakeupListen, cooldown: -1},
	{name: "polling only, PollInterval 10ms", key: "poll10", wakeup: relay.WakeupPoll, poll: 10 * time.Millisecond},
	{name: "polling only, default PollInterval", key: "poll", wakeup: relay.WakeupPoll},
}

// latencyPathKeys lists every path's key, for -latency-paths.
func latencyPathKeys() []string {
	keys := make([]string, 0, len(wakePaths))
	for _, p := range wakePaths {
		keys = append(keys, p.key)
	}
	return keys
}

// latencyResult is the commit→sink latency of one path at one rate.
type latencyResult struct {
	path     wakePath
	rate     int
	events   int
	achieved float64         // events/s actually committed
	lat      []time.Duration // sorted; empty for the producer alone
	txs      []time.Duration // the producer's transactions, begin to commit, sorted
	claims   int64           // the relay's claim transactions (the loop's statements)
	round    int             // which run of the set of paths, from 1
	warmup   time.Duration   // -latency-drained: how long the first event took (warmUp)
}

func (b *bench) latency(ctx context.Context) (partReport, error) {
	var paths []wakePath
	for _, path := range wakePaths {
		if slices.Contains(b.o.latencyPaths, path.key) {
			paths = append(paths, path)
		}
	}
	for _, d := range b.o.latencyCooldowns {
		paths = append(paths, wakePath{name: "default, ClaimCooldown " + d.String(), notifier: true, wakeup: relay.WakeupListen, cooldown: d})
	}
	var results []latencyResult
	for _, rate := range b.o.rates {
		for round := 1; round <= b.o.latencyRounds; round++ {
			for _, path := range paths {
				res, err := b.latencyRun(ctx, path, rate)
				if err != nil {
					return partReport{}, fmt.Errorf("%s at %d events/s: %w", path.name, rate, err)
				}
				res.round = round
				fmt.Fprintf(os.Stderr, "latency %5d/s round %d %-42s p50 %6.2f p99 %7.2f ms, producer tx p99 %6.2f ms, %.2f claims/event, warm-up %.0f ms\n", rate, round, path.name,
					ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), ms(percentile(res.txs, 99)), float64(res.claims)/float64(res.events), ms(res.warmup))
				results = append(results, res)
			}
		}
	}
	return b.latencyReport(results), nil
}

// latencyRun runs a relay child for path, produces rate events/s for the configured
// duration, and joins the producer's commit times with the child's receipts.
func (b *bench) latencyRun(ctx context.Context, path wakePath, rate int) (latencyResult, error) {
	if err := resetForRelay(ctx, b.pool, relay.Ordered); err != nil {
		return latencyResult{}, err
	}
	if err := b.drainedBacklog(ctx); err != nil {
		return latencyResult{}, err
	}
	if path.trigger {
		if err := relay.InstallNotifyTrigger(ctx, b.pool, ""); err != nil {
			return latencyResult{}, err
		}
	}
	dir, err := os.MkdirTemp("", "relaybench-")
	if err != nil {
		return latencyResult{}, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	receipts := filepath.Join(dir, "receipts")
	var slot string
	if path.cdc {
		slot = b.newSlot()
		defer b.dropSlot(slot)
	}
	if path.none {
		ids, _, txs, achieved, err := b.produce(ctx, path, rate, slot)
		if err != nil {
			return latencyResult{}, err
		}
		return latencyResult{path: path, rate: rate, events: len(ids), achieved: achieved, txs: txs}, nil
	}
	c, err := startChild(ctx, childConfig{
		DSN: b.o.dsn, DB: b.o.database, Instances: 1, Sink: sinkRecord, Receipts: receipts, FollowLoop: path.loop,
		Relay: relay.Config{Wakeup: path.wakeup, PollInterval: path.poll, ClaimCooldown: path.cooldown, Concurrency: path.concurrency}, CDC: slot,
	})
	if err != nil {
		return latencyResult{}, err
	}
	warmup, err := b.warmUp(ctx)
	if err != nil {
		c.kill()
		return latencyResult{}, err
	}
	ids, commits, txs, achieved, err := b.produce(ctx, path, rate, slot)
	if err == nil && path.tableless {
		err = b.waitConfirmed(ctx, slot) // no rows to count
	} else if err == nil {
		err = b.waitPublished(ctx, b.o.latencyDrained+warmupEvents(b.o.latencyDrained)+len(ids))
	}
	if err != nil {
		c.kill()
		return latencyResult{}, err
	}
	cr, got, err := c.stopWithReceipts(receipts)
	if err != nil {
		return latencyResult{}, err
	}
	lat, err := join(ids, commits, got)
	if err != nil {
		return latencyResult{}, err
	}
	return latencyResult{path: path, rate: rate, events: len(ids), achieved: achieved, lat: lat, txs: txs, claims: cr.Stats.Claims + cr.Statements, warmup: warmup}, nil
}

// drainedBacklog leaves -latency-drained published rows before a latency run, as a
// busy database looks between autovacuum runs: inserted pending, all marked published by
// one UPDATE, then ANALYZE and no VACUUM (their dead index entries stay).
func (b *bench) drainedBacklog(ctx context.Context) error {
	if b.o.latencyDrained == 0 {
		return nil
	}
	if err := benchdb.Fill(ctx, b.pool, b.o.latencyDrained, b.o.aggregates, false); err != nil {
		return err
	}
	for _, q := range []string{"UPDATE outbox.events SET published_at = now(), attempts = attempts + 1 WHERE published_at IS NULL", "ANALYZE outbox.events", "CHECKPOINT"} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("drained backlog: %s: %w", q, err)
		}
	}
	return nil
}

// warmupEvents is how many events warmUp writes: 100 after a drained backlog (over 100
// aggregates, so every worker's share of the partitions gets some), else none.
func warmupEvents(drained int) int { return min(drained, 100) }

// warmUp, after a drained backlog (-latency-drained), writes warmupEvents events, wakes
// the relays, and returns how long they took to be published: the first claims of a
// relay (or loop) that starts on a drained backlog read its dead index entries once (ADR
// 0010's floor starts unknown; each ordered worker discovers its own share), which the
// steady trickle measured after it does not repeat.
func (b *bench) warmUp(ctx context.Context) (time.Duration, error) {
	if warmupEvents(b.o.latencyDrained) == 0 {
		return 0, nil
	}
	began := time.Now()
	n := warmupEvents(b.o.latencyDrained)
	if err := benchdb.Fill(ctx, b.pool, n, n, false); err != nil {
		return 0, err
	}
	if _, err := b.pool.Exec(ctx, "SELECT pg_notify($1, '')", outbox.WakeupChannel("outbox")); err != nil {
		return 0, fmt.Errorf("wake the relay: %w", err)
	}
	if err := b.waitPublished(ctx, b.o.latencyDrained+n); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	return time.Since(began), nil
}

// produce commits one event per transaction at rate events/s for the configured
// duration (an open schedule: event i is due at start + i/rate) and returns each
// event's id, the wall-clock time stamped just before its COMMIT was sent (latency is
// measured from there, as a peer harness does: the event exists for the relay only
// after the commit, which the relay must not be credited for), and each transaction's
// duration from BEGIN to the end of COMMIT, sorted.
func (b *bench) produce(ctx context.Context, path wakePath, rate int, slot string) ([]uuid.UUID, []int64, []time.Duration, float64, error) {
	writer, err := outbox.NewWriter(&outbox.WriterConfig{Slot: slot})
	if err != nil {
		return nil, nil, nil, 0, err
	}
	write := writer.Enqueue
	if path.tableless {
		write = writer.Emit
	}
	afterCommit := func(context.Context) {}
	if path.notifier {
		n, err := outbox.NewNotifier(b.pool, nil)
		if err != nil {
			return nil, nil, nil, 0, fmt.Errorf("new notifier: %w", err)
		}
		defer n.Close()
		afterCommit = n.AfterCommit
	}
	return b.produceLoop(ctx, rate, func(ctx context.Context, tx pgx.Tx, id uuid.UUID, rng *rand.Rand) error {
		e := benchdb.Event(1 + rng.IntN(benchdb.Accounts))
		e.ID = id
		if _, err := tx.Exec(ctx, benchdb.UpdateSQL, 1+rng.IntN(benchdb.Accounts)); err != nil { // the business row
			return err
		}
		return write(ctx, outbox.PgxTx(tx), e)
	}, afterCommit)
}

// txBody is the inside of one producer transaction: the business write and the event
// id (the peer's own write of it), before COMMIT.
type txBody func(ctx context.Context, tx pgx.Tx, id uuid.UUID, rng *rand.Rand) error

// produceLoop runs the producer of produce with body inside each transaction and
// afterCommit after each commit.
func (b *bench) produceLoop(ctx context.Context, rate int, body txBody, afterCommit func(context.Context)) ([]uuid.UUID, []int64, []time.Duration, float64, error) {
	total := int(float64(rate) * b.o.latencyDuration.Seconds())
	p, err := b.runProducer(ctx, total, time.Second/time.Duration(rate), producerWorkers, body, afterCommit)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	slices.Sort(p.txs)
	return p.ids, p.commits, p.txs, float64(total) / p.elapsed.Seconds(), nil
}

// production is what runProducer's transactions did, by transaction.
type production struct {
	ids []uuid.UUID
	// commits: the wall-clock time (unix ns) stamped just before COMMIT was sent;
	// committed: when COMMIT returned
	commits, committed []int64
	// txs: each transaction's duration from BEGIN to the end of COMMIT
	txs []time.Duration
	// elapsed: from the start to the last commit's end
	elapsed time.Duration
}

// runProducer runs total transactions of body on workers connections, transaction i
// due at start + i·interval (interval 0: each as soon as a worker is free), and returns
// what they did.
func (b *bench) runProducer(ctx context.Context, total int, interval time.Duration, workers int, body txBody, afterCommit func(context.Context)) (production, error) {
	p := production{ids: make([]uuid.UUID, total), commits: make([]int64, total), committed: make([]int64, total), txs: make([]time.Duration, total)}
	for i := range p.ids {
		p.ids[i] = outbox.NewID()
	}
	due := make(chan int, workers)
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	g.Go(func() error {
		defer close(due)
		for i := range total {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				if err := sleepCtx(gctx, d); err != nil {
					return err
				}
			}
			select {
			case due <- i:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(w))) //nolint:gosec // load generation
		g.Go(func() error {
			for i := range due {
				began := time.Now()
				tx, err := b.pool.Begin(gctx)
				if err != nil {
					return fmt.Errorf("produce event %d: %w", i, err)
				}
				if err := body(gctx, tx, p.ids[i], rng); err != nil {
					_ = tx.Rollback(gctx)
					return fmt.Errorf("produce event %d: %w", i, err)
				}
				p.commits[i] = time.Now().UnixNano()
				if err := tx.Commit(gctx); err != nil {
					return fmt.Errorf("produce event %d: %w", i, err)
				}
				end := time.Now()
				p.committed[i], p.txs[i] = end.UnixNano(), end.Sub(began)
				afterCommit(gctx)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return production{}, err
	}
	p.elapsed = time.Since(start)
	return p, nil
}

// waitPublished waits until n events are published.
func (b *bench) waitPublished(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var published int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`).Scan(&published); err != nil {
			return fmt.Errorf("count published: %w", err)
		}
		if published >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events published after 2 minutes", published, n)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("wait for the relay: %w", err)
		}
	}
}

// waitConfirmed waits until the slot has confirmed the server's position now: the
// Source confirms only what it has published (or written to the table), so once it has,
// every event committed before is out (table-less events leave no row to count).
func (b *bench) waitConfirmed(ctx context.Context, slot string) error {
	var end string
	if err := b.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		return fmt.Errorf("read the WAL position: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var done bool
		if err := b.pool.QueryRow(ctx, `SELECT coalesce(bool_or(confirmed_flush_lsn >= $2::pg_lsn), false) FROM pg_replication_slots WHERE slot_name = $1`, slot, end).Scan(&done); err != nil {
			return fmt.Errorf("read the slot's position: %w", err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s has not confirmed %s after 2 minutes", slot, end)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("wait for the relay: %w", err)
		}
	}
}

// stopWithReceipts stops a child whose sink records receipts into the file at path, and
// returns its result and the receipts.
func (c *child) stopWithReceipts(path string) (childResult, map[uuid.UUID]int64, error) {
	if err := c.send("STOP"); err != nil {
		c.kill()
		return childResult{}, nil, err
	}
	res, err := c.result()
	if err != nil {
		return childResult{}, nil, err
	}
	got, err := readReceipts(path)
	return res, got, err
}

// readReceipts reads the child's "id unix-ns" lines; the first receipt of an id wins.
func readReceipts(path string) (map[uuid.UUID]int64, error) {
	f, err := os.Open(path) //nolint:gosec // our own temporary file
	if err != nil {
		return nil, fmt.Errorf("open receipts: %w", err)
	}
	defer func() { _ = f.Close() }()
	out := map[uuid.UUID]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		idText, atText, ok := strings.Cut(sc.Text(), " ")
		id, err := uuid.Parse(idText)
		if !ok || err != nil {
			return nil, fmt.Errorf("bad receipt line %q", sc.Text())
		}
		at, err := strconv.ParseInt(atText, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad receipt line %q: %w", sc.Text(), err)
		}
		if _, seen := out[id]; !seen {
			out[id] = at
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	return out, nil
}

// join returns, sorted, each event's latency from commit to receipt; every event must
// have been received.
func join(ids []uuid.UUID, commits []int64, receipts map[uuid.UUID]int64) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, len(ids))
	for i, id := range ids {
		at, ok := receipts[id]
		if !ok {
			return nil, fmt.Errorf("event %s was committed but never reached the sink", id)
		}
		lat = append(lat, time.Duration(at-commits[i]))
	}
	slices.Sort(lat)
	return lat, nil
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of sorted, or 0
// when sorted is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (b *bench) latencyReport(results []latencyResult) partReport {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Commit → publish latency\n\n")
	p("A producer process commits one event per business transaction (`UPDATE accounts …` + `outbox.Enqueue`, %d workers on an open schedule) at a steady rate for %s; ", producerWorkers, b.o.latencyDuration)
	p("one relay (default settings: ordered, BatchSize 100, MaxPerAggregate 10, Concurrency 2, the second worker only while busy) runs in a child process with a sink that records when each message arrives. ")
	p("Latency = the sink's receipt time − the time stamped just before the producer sent COMMIT, both `time.Now()` wall clock on one machine, joined by event id (the commit's own time counts against the relay, as a peer harness measures it). ")
	p("Paths: the producer alone (no relay: its own transaction times), the plain-SQL follow loop (`UPDATE … SET published_at = now() WHERE seq IN (SELECT … ORDER BY seq LIMIT 1000 FOR UPDATE SKIP LOCKED) RETURNING id` every 10 ms, again at once while a poll fills a statement: the reference), ")
	p("the default (the producer calls `outbox.Notifier.AfterCommit` after each commit, the relay LISTENs), the opt-in trigger (`relay.InstallNotifyTrigger`, relay LISTENs), ")
	p("the default and the trigger with `ClaimCooldown` negative (no cooldown: a claim per wake-up), the default with `Concurrency: 1` (one worker, busy or not), and polling only (`Wakeup: WakeupPoll`) at PollInterval 10ms and at the relay's default PollInterval (500ms). ")
	if b.o.latencyDrained > 0 {
		p("Before every run, %d events were inserted and all marked published by one UPDATE, then `ANALYZE`, no `VACUUM` (a drained backlog between autovacuum runs: its dead index entries stay); once the relay (or loop) started, 100 events of 100 aggregates were written and the time until they were published is the warm-up column (a relay that starts on a drained backlog reads its dead entries once). ", b.o.latencyDrained)
	}
	p("Claims per event: the relay's claim transactions (`Stats.Claims`, empty ones too) or the loop's statements, per event. Milliseconds:\n\n")
	p("The set of paths runs %d times, one round after the other; ratios are taken within a round, and targets are judged on the median of the rounds' ratios (this shared machine's tail moves by several times between minutes).\n\n", b.o.latencyRounds)
	p("| rate (events/s) | round | path | events | achieved rate | p50 | p95 | p99 | max | claims/event | producer tx p99 | warm-up ms |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	type key struct{ rate, round int }
	alone, loop := map[key]latencyResult{}, map[key]latencyResult{}
	for _, r := range results {
		switch {
		case r.path.none:
			alone[key{r.rate, r.round}] = r
		case r.path.loop > 0:
			loop[key{r.rate, r.round}] = r
		}
	}
	var p99s, vsLoop, vsAlone []float64
	for _, r := range results {
		if r.path.none {
			p("| %d | %d | %s | %d | %.0f | | | | | | %.2f | |\n", r.rate, r.round, r.path.name, r.events, r.achieved, ms(percentile(r.txs, 99)))
			continue
		}
		p99 := percentile(r.lat, 99)
		warm := ""
		if r.warmup > 0 {
			warm = fmt.Sprintf("%.0f", ms(r.warmup))
		}
		p("| %d | %d | %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", r.rate, r.round, r.path.name, r.events, r.achieved,
			ms(percentile(r.lat, 50)), ms(percentile(r.lat, 95)), ms(p99), ms(r.lat[len(r.lat)-1]), float64(r.claims)/float64(r.events), ms(percentile(r.txs, 99)), warm)
		if !r.path.notifier || r.path.cooldown != 0 || r.rate != targetLatencyRate {
			continue
		}
		p99s = append(p99s, ms(p99))
		if l, ok := loop[key{r.rate, r.round}]; ok {
			vsLoop = append(vsLoop, float64(p99)/float64(percentile(l.lat, 99)))
		}
		if a, ok := alone[key{r.rate, r.round}]; ok {
			vsAlone = append(vsAlone, float64(percentile(r.txs, 99))/float64(percentile(a.txs, 99)))
		}
	}
	var targets []string
	judge := func(what string, values []float64, limit float64, unit string) {
		if len(values) == 0 {
			return
		}
		m := medianFloat(values)
		each := make([]string, len(values))
		for i, v := range values {
			each[i] = fmt.Sprintf("%.2f", v)
		}
		targets = append(targets, fmt.Sprintf("%s (median of %d rounds): %s — %.2f%s (rounds: %s).", what, len(values), benchreport.Met(m <= limit), m, unit, strings.Join(each, ", ")))
	}
	judge(fmt.Sprintf("Latency, default path at %d events/s, p99 ≤ %s", targetLatencyRate, targetLatencyP99), p99s, ms(targetLatencyP99), " ms")
	judge(fmt.Sprintf("Latency, default path at %d events/s, p99 ≤ %.1f × the plain-SQL 10 ms follow loop's (same round)", targetLatencyRate, targetVsLoop), vsLoop, targetVsLoop, " ×")
	judge(fmt.Sprintf("Producer, default path at %d events/s, tx p99 ≤ %.1f × the producer alone's (same round)", targetLatencyRate, targetProducerTx), vsAlone, targetProducerTx, " ×")
	return partReport{md: md.String(), targets: targets}
}

// medianFloat returns the median of values (the mean of the middle two for an even count).
func medianFloat(values []float64) float64 {
	s := slices.Sorted(slices.Values(values))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
