package main

// The cdc part compares change data capture (package cdc: a Source reading the events
// table's inserts from a logical replication slot and handing each committed
// transaction's seqs to Relay.PublishSeqs) with the polling relay, on one throwaway
// cluster with wal_level=logical (the shared server runs wal_level=replica).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
)

// cdcTxEvents is the events per producer transaction of the cdc part's burst.
const cdcTxEvents = 100

// cdcClusterSettings make the throwaway cluster run as the shared server at 5432 does
// (its non-default settings, and durable commits: pgtest's fsync, full_page_writes and
// synchronous_commit off are turned on again — with synchronous_commit off a commit's
// WAL reaches the slot only at the WAL writer's next flush, up to wal_writer_delay
// later, which CDC would be charged for). -cdc-settings appends to them.
var cdcClusterSettings = []string{
	"fsync = on", "full_page_writes = on", "synchronous_commit = on",
	"max_connections = 100", "shared_buffers = 128MB", "autovacuum = off",
	"max_wal_size = 1GB", "min_wal_size = 80MB",
}

// startCDCCluster starts the cdc part's cluster: wal_level=logical, the settings above
// and extra.
func startCDCCluster(extra []string) (*pgtest.Cluster, error) {
	c, err := pgtest.StartCluster(slices.Concat(cdcClusterSettings, extra)...)
	if err != nil {
		return nil, fmt.Errorf("start a cluster with wal_level=logical: %w", err)
	}
	return c, nil
}

// newSlot names a replication slot (and publication) for one run: a fresh schema's
// events table is a new table, which the publication of an earlier run does not cover.
func (b *bench) newSlot() string {
	b.slots++
	return fmt.Sprintf("relaybench_%d", b.slots)
}

// dropSlot drops the slot and publication of a run once its reader is gone.
func (b *bench) dropSlot(slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		_, err := b.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			break
		}
		if sleepCtx(ctx, 100*time.Millisecond) != nil { // still active: the child's walsender is ending
			fmt.Fprintf(os.Stderr, "drop replication slot %s: %v\n", slot, err)
			return
		}
	}
	if _, err := b.pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{slot}.Sanitize()); err != nil {
		fmt.Fprintf(os.Stderr, "drop publication %s: %v\n", slot, err)
	}
}

// cdcBurstRun is one arm of the cdc part's burst.
type cdcBurstRun struct {
	mode relay.Mode
	cdc  bool
	// tableless: the producer writes with outbox.Writer.Emit (no rows; cdc set)
	tableless bool
	res       childResult
	first     int64         // unix ns stamped before the first COMMIT was sent
	lastEnd   int64         // unix ns of the end of the last COMMIT
	write     time.Duration // the producer's time for the whole burst
	txs       []time.Duration
}

func (r cdcBurstRun) name() string {
	if r.tableless {
		return fmt.Sprintf("CDC table-less %s (outbox.Emit; cdc.Source)", r.mode)
	}
	if r.cdc {
		return fmt.Sprintf("CDC %s (cdc.Source; relay WakeupPoll)", r.mode)
	}
	return fmt.Sprintf("polling %s (Notifier after commit + LISTEN)", r.mode)
}

// drain is from the first COMMIT to the last event published.
func (r cdcBurstRun) drain() time.Duration { return time.Duration(r.res.DoneAt - r.first) }

// cdcBurst starts one relay (with a Source when useCDC) on a fresh, empty schema, waits
// until it idles, then has the producer write -events events as fast as it can, in
// transactions of cdcTxEvents on -cdc-writers connections, and returns when the relay
// has published them all.
// With tableless (useCDC too), the producer writes with Writer.Emit: no rows.
func (b *bench) cdcBurst(ctx context.Context, mode relay.Mode, useCDC, tableless bool) (cdcBurstRun, error) {
	run := cdcBurstRun{mode: mode, cdc: useCDC, tableless: tableless}
	if err := resetForRelay(ctx, b.pool, mode); err != nil {
		return run, err
	}
	cfg := relay.Config{Mode: mode, BatchSize: b.o.batch, MaxPerAggregate: b.o.maxPerAggregate}
	afterCommit := func(context.Context) {}
	var slot string
	if useCDC {
		slot = b.newSlot()
		defer b.dropSlot(slot)
		cfg.Wakeup, cfg.PollInterval = relay.WakeupPoll, b.o.cdcPoll
	} else {
		n, err := outbox.NewNotifier(b.pool, nil)
		if err != nil {
			return run, fmt.Errorf("new notifier: %w", err)
		}
		defer n.Close()
		afterCommit = n.AfterCommit
	}
	txns := b.o.events / cdcTxEvents
	c, err := startChild(ctx, childConfig{
		DSN: b.o.dsn, DB: b.o.database, Instances: 1, Relay: cfg, Sink: sinkMem, Expect: int64(txns * cdcTxEvents),
		CheckOrder: mode == relay.Ordered, CDC: slot, Timeout: 3 * time.Minute,
	})
	if err != nil {
		return run, err
	}
	writer, err := outbox.NewWriter(&outbox.WriterConfig{Slot: slot})
	if err != nil {
		c.kill()
		return run, err
	}
	write := writer.Enqueue
	if tableless {
		write = writer.Emit
	}
	var next atomic.Int64
	body := func(ctx context.Context, tx pgx.Tx, _ uuid.UUID, _ *rand.Rand) error {
		k := int(next.Add(1) - 1)
		events := make([]outbox.Event, cdcTxEvents)
		for j := range events {
			// transaction k writes cdcTxEvents consecutive aggregates: the few
			// transactions in flight at once do not wait for each other's aggregate locks
			events[j] = benchdb.Event((k*cdcTxEvents+j)%b.o.aggregates + 1)
		}
		return write(ctx, outbox.PgxTx(tx), events...)
	}
	err = c.send("GO")
	var p production
	began := time.Now()
	if err == nil {
		p, err = b.runProducer(ctx, txns, 0, b.o.cdcWriters, body, afterCommit)
		run.txs, run.write = p.txs, p.elapsed
		slices.Sort(run.txs)
	}
	if err != nil {
		c.kill()
		return run, err
	}
	run.first, run.lastEnd = slices.Min(p.commits), began.Add(run.write).UnixNano()
	if run.res, err = c.result(); err != nil {
		return run, err
	}
	if run.res.OrderViolations > 0 {
		return run, fmt.Errorf("%d per-aggregate order violations", run.res.OrderViolations)
	}
	return run, b.checkDrained(ctx, tableless, txns*cdcTxEvents) // table-less: no rows
}

// cdcPaths are the latency paths of the cdc part.
func (b *bench) cdcPaths() []wakePath {
	return []wakePath{
		{name: "no relay (the producer alone)", none: true},
		{name: "polling, default wake-up: Notifier after commit + LISTEN", notifier: true, wakeup: relay.WakeupListen},
		{name: fmt.Sprintf("CDC: cdc.Source, no Notifier; relay WakeupPoll, PollInterval %s", b.o.cdcPoll), cdc: true, wakeup: relay.WakeupPoll, poll: b.o.cdcPoll},
		{name: "CDC table-less: outbox.Emit, cdc.Source (as above)", cdc: true, tableless: true, wakeup: relay.WakeupPoll, poll: b.o.cdcPoll},
	}
}

func (b *bench) cdc(ctx context.Context) (partReport, error) {
	var bursts []cdcBurstRun
	for _, mode := range b.o.modes {
		for _, arm := range []struct{ cdc, tableless bool }{{false, false}, {true, false}, {true, true}} {
			r, err := b.cdcBurst(ctx, mode, arm.cdc, arm.tableless)
			if err != nil {
				return partReport{}, fmt.Errorf("burst, %s: %w", r.name(), err)
			}
			fmt.Fprintf(os.Stderr, "cdc burst %-50s %8.0f events/s (first commit → last published %.2f s; producer %.2f s; tail %.0f ms), CDC published %d left %d\n",
				r.name(), eps(b.o.events, r.drain()), r.drain().Seconds(), r.write.Seconds(), ms(time.Duration(r.res.DoneAt-r.lastEnd)), r.res.CDC.Published, r.res.CDC.Left)
			bursts = append(bursts, r)
		}
	}
	var lats []latencyResult
	for _, rate := range b.o.rates {
		for _, path := range b.cdcPaths() {
			res, err := b.latencyRun(ctx, path, rate)
			if err != nil {
				return partReport{}, fmt.Errorf("latency, %s at %d events/s: %w", path.name, rate, err)
			}
			fmt.Fprintf(os.Stderr, "cdc latency %5d/s %-70s p50 %6.2f p99 %7.2f ms, producer tx p99 %6.2f ms\n", rate, path.name,
				ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), ms(percentile(res.txs, 99)))
			lats = append(lats, res)
		}
	}
	var left int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&left); err != nil {
		return partReport{}, fmt.Errorf("count replication slots: %w", err)
	}
	if left != 0 {
		return partReport{}, fmt.Errorf("%d replication slots left behind", left)
	}
	return b.cdcReport(bursts, lats), nil
}

func (b *bench) cdcReport(bursts []cdcBurstRun, lats []latencyResult) partReport {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Change data capture vs polling\n\n")
	p("On one throwaway cluster (`pgtest.StartCluster`: wal_level=logical, with the shared server's settings: %s; the same for every arm), ", strings.Join(slices.Concat(cdcClusterSettings, b.o.cdcSettings), ", "))
	p("one relay runs in a child process, either polling with the default wake-up (the producer calls `outbox.Notifier.AfterCommit` after each commit, the relay LISTENs) ")
	p("or with a `cdc.Source` beside it (no Notifier; the relay with `Wakeup: WakeupPoll`, PollInterval %s, so what it publishes came by the slot unless CDC left it). ", b.o.cdcPoll)
	p("The table-less arms write with `outbox.Writer.Emit` instead of `Enqueue` (the events go into the WAL only; no row unless one cannot be published; their order is commit order, which carries no seq to check here: the `cdc` tests check it). ")
	p("Each CDC run has a slot and publication of its own, created when the Source starts and dropped after the run.\n\n")
	p("**Burst.** CDC sees only what commits after its slot exists, so no arm drains a backlog written before it starts: the relay (and the Source) start on an empty, freshly migrated schema and idle; ")
	p("then the producer writes %d events as fast as it can, %d per transaction (`outbox.Enqueue` of %d consecutive aggregates of %d), on %d connections. ", b.o.events, cdcTxEvents, cdcTxEvents, b.o.aggregates, b.o.cdcWriters)
	p("The drain time runs from the time stamped before the first COMMIT to the relay's `Stats().Published` reaching the total (counted after each batch commits); the tail is from the end of the last COMMIT to then. ")
	p("Relay BatchSize %d, MaxPerAggregate %d, in-memory sink, ordered runs checked for per-aggregate order. CDC published / left / by polling: the Source's `Stats` (left: its by-seq claims found the rows taken or not claimable) and what the relay published otherwise, by its own polling claims (a `WakeupPoll` relay claims again at once after any claim that found events, so once a polling claim catches a burst it races the Source through it).\n\n", b.o.batch, b.o.maxPerAggregate)
	p("| configuration | events/s, first commit → last published | drain time | producer's write time | tail after the last commit | producer tx p99 | CDC published / left / by polling | batches | relay CPU |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range bursts {
		cdcCol := ""
		if r.cdc {
			cdcCol = fmt.Sprintf("%d / %d / %d", r.res.CDC.Published, r.res.CDC.Left, r.res.Stats.Published-r.res.CDC.Published)
		}
		p("| %s | %.0f | %.2f s | %.2f s | %.0f ms | %.2f ms | %s | %d | %.0f%% |\n", r.name(), eps(b.o.events, r.drain()), r.drain().Seconds(), r.write.Seconds(),
			ms(time.Duration(r.res.DoneAt-r.lastEnd)), ms(percentile(r.txs, 99)), cdcCol, r.res.Stats.Batches, 100*r.res.CPU.Seconds()/r.res.Elapsed.Seconds())
	}
	p("\n**Latency.** As in the latency part: a producer commits one event per business transaction (`UPDATE accounts …` + `outbox.Enqueue`, %d workers on an open schedule) at a steady rate for %s; ", producerWorkers, b.o.latencyDuration)
	p("one relay with default settings (ordered) and a recording sink; latency = receipt − the time stamped just before COMMIT was sent. Milliseconds:\n\n")
	p("| rate (events/s) | path | events | achieved rate | p50 | p95 | p99 | max | producer tx p99 |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range lats {
		if r.path.none {
			p("| %d | %s | %d | %.0f | | | | | %.2f |\n", r.rate, r.path.name, r.events, r.achieved, ms(percentile(r.txs, 99)))
			continue
		}
		p("| %d | %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r.rate, r.path.name, r.events, r.achieved,
			ms(percentile(r.lat, 50)), ms(percentile(r.lat, 95)), ms(percentile(r.lat, 99)), ms(r.lat[len(r.lat)-1]), ms(percentile(r.txs, 99)))
	}
	return partReport{md: md.String()}
}
