package main

// The peers part: the relay's commit→publish latency and its cost to the producer, side
// by side in one run with real peers — watermill-sql's forwarder and River — and the
// plain-SQL follow loop, all with the same producer loop, the same business transaction
// (one INSERT into orders plus the peer's own write of the event), the same rate and
// duration, the clock taken just before COMMIT, and each consumer in a child process
// recording when it hands a message to its sink. The whole set is repeated
// -latency-rounds times so that ratios are read within one run.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/bench/internal/benchdb"
	"github.com/outboxkit/outbox/bench/internal/benchreport"
	"github.com/outboxkit/outbox/relay"
)

// peerPoll is the poll interval the polling configurations share (the plain loop,
// watermill, River tuned).
const peerPoll = 10 * time.Millisecond

// peerKind is what consumes the events of one peers configuration.
type peerKind int

const (
	peerAlone  peerKind = iota // nothing: the producer alone, its order INSERT only
	peerLoop                   // the plain-SQL follow loop over outbox.events
	peerRelay                  // this relay, default path (Notifier after commit + LISTEN)
	peerWM                     // watermill-sql forwarder
	peerRiverQ                 // River
)

// peerRun is one configuration of the peers part.
type peerRun struct {
	name  string
	kind  peerKind
	fetch time.Duration // watermill's PollInterval; River's FetchCooldown and FetchPollInterval (0: defaults)
}

// peerRuns returns the configurations of one round, in run order, for the -peers list.
func peerRuns(peers []string) []peerRun {
	runs := []peerRun{
		{name: "no peer (the producer alone: order INSERT only)", kind: peerAlone},
		{name: "plain-SQL follow loop, 10ms poll", kind: peerLoop},
		{name: "this relay, default: Notifier after commit + LISTEN", kind: peerRelay},
	}
	if slices.Contains(peers, peerWatermill) {
		runs = append(runs, peerRun{name: "watermill-sql forwarder, PollInterval 10ms", kind: peerWM, fetch: peerPoll})
	}
	if slices.Contains(peers, peerRiver) {
		runs = append(runs,
			peerRun{name: "River, default fetch (FetchCooldown 100ms, FetchPollInterval 1s)", kind: peerRiverQ},
			peerRun{name: "River, FetchCooldown 10ms, FetchPollInterval 10ms", kind: peerRiverQ, fetch: peerPoll})
	}
	return runs
}

// parsePeers reads -peers.
func parsePeers(s string, into *[]string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for f := range strings.SplitSeq(s, ",") {
		switch p := strings.TrimSpace(f); p {
		case peerWatermill, peerRiver:
			*into = append(*into, p)
		default:
			return fmt.Errorf("-peers: unknown peer %q (want %s, %s)", p, peerWatermill, peerRiver)
		}
	}
	return nil
}

// peerResult is one configuration's measurement in one round.
type peerResult struct {
	run        peerRun
	round      int
	rate       int
	events     int
	achieved   float64
	lat        []time.Duration // sorted, received events only
	txs        []time.Duration // sorted
	lost, dups int
	walBytes   int64 // WAL written from the producer's start until the consumer stopped
	claims     int64 // this relay's claim transactions, the plain loop's statements
}

// walLSN returns the server's current WAL position in bytes.
func (b *bench) walLSN(ctx context.Context) (int64, error) {
	var lsn int64
	if err := b.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return lsn, nil
}

func (b *bench) peers(ctx context.Context) (partReport, error) {
	if _, err := b.pool.Exec(ctx, benchdb.OrdersSQL); err != nil {
		return partReport{}, fmt.Errorf("create orders: %w", err)
	}
	if err := b.migrateRiver(ctx); err != nil {
		return partReport{}, err
	}
	runs := peerRuns(b.o.peers)
	var results []peerResult
	for _, rate := range b.o.rates {
		for round := 1; round <= b.o.latencyRounds; round++ {
			for _, run := range runs {
				res, err := b.peerRun(ctx, run, rate)
				if err != nil {
					return partReport{}, fmt.Errorf("%s at %d events/s, round %d: %w", run.name, rate, round, err)
				}
				res.round = round
				fmt.Fprintf(os.Stderr, "peers %5d/s round %d %-62s p50 %7.2f p99 %7.2f p999 %7.2f ms, producer tx p99 %6.2f ms, WAL %.0f B/event, lost %d, dups %d\n", rate, round, run.name,
					ms(percentile(res.lat, 50)), ms(percentile(res.lat, 99)), ms(percentile(res.lat, 99.9)), ms(percentile(res.txs, 99)), walPerEvent(res), res.lost, res.dups)
				results = append(results, res)
			}
		}
	}
	return b.peersReport(runs, results), nil
}

// migrateRiver creates River's schema afresh and migrates it with rivermigrate.
func (b *bench) migrateRiver(ctx context.Context) error {
	for _, q := range []string{"DROP SCHEMA IF EXISTS " + riverSchema + " CASCADE", "CREATE SCHEMA " + riverSchema} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	m, err := rivermigrate.New(riverpgxv5.New(b.pool), &rivermigrate.Config{Schema: riverSchema})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate river: %w", err)
	}
	return nil
}

// resetPeers empties the orders, migrates a fresh outbox schema, recreates watermill's
// schema (its tables are created by the forwarder's subscriber), empties River's
// tables (migrated once: recreating them would change the types the producer pool's
// cached River statements return), and takes a checkpoint, so every configuration
// starts alike.
func (b *bench) resetPeers(ctx context.Context) error {
	if err := resetForRelay(ctx, b.pool, relay.Ordered); err != nil {
		return err
	}
	var riverTables string
	if err := b.pool.QueryRow(ctx, `SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables WHERE schemaname = $1 AND tablename <> 'river_migration'`, riverSchema).Scan(&riverTables); err != nil {
		return fmt.Errorf("list river tables: %w", err)
	}
	for _, q := range []string{
		"TRUNCATE orders",
		"DROP SCHEMA IF EXISTS " + watermillSchema + " CASCADE",
		"CREATE SCHEMA " + watermillSchema,
		"TRUNCATE " + riverTables,
		"CHECKPOINT",
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset peers: %s: %w", q, err)
		}
	}
	return nil
}

// insertOrder is the business write every configuration starts its transaction with.
func insertOrder(ctx context.Context, tx pgx.Tx, rng *rand.Rand) (uuid.UUID, error) {
	id := outbox.NewID()
	customer := 1 + rng.IntN(benchdb.Accounts)
	if _, err := tx.Exec(ctx, benchdb.InsertOrderSQL, [16]byte(id), customer, int64(customer)*100); err != nil {
		return id, fmt.Errorf("insert order: %w", err)
	}
	return id, nil
}

// peerBody returns the producer's transaction body and after-commit hook for run, and
// a function releasing what they hold.
func (b *bench) peerBody(run peerRun) (txBody, func(context.Context), func(), error) {
	noop := func(context.Context) {}
	enqueue := func(ctx context.Context, tx pgx.Tx, id uuid.UUID, rng *rand.Rand) error {
		order, err := insertOrder(ctx, tx, rng)
		if err != nil {
			return err
		}
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{ID: id, AggregateType: "order", AggregateID: order.String(), EventType: "order.placed", Payload: benchdb.Payload})
	}
	switch run.kind {
	case peerAlone:
		return func(ctx context.Context, tx pgx.Tx, _ uuid.UUID, rng *rand.Rand) error {
			_, err := insertOrder(ctx, tx, rng)
			return err
		}, noop, func() {}, nil
	case peerLoop:
		return enqueue, noop, func() {}, nil
	case peerRelay:
		n, err := outbox.NewNotifier(b.pool, nil)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("new notifier: %w", err)
		}
		return enqueue, n.AfterCommit, n.Close, nil
	case peerWM:
		logger := watermill.NopLogger{}
		return func(ctx context.Context, tx pgx.Tx, id uuid.UUID, rng *rand.Rand) error {
			if _, err := insertOrder(ctx, tx, rng); err != nil {
				return err
			}
			return publishWatermill(ctx, tx, id.String(), benchdb.Payload, logger)
		}, noop, func() {}, nil
	case peerRiverQ:
		client, err := river.NewClient(riverpgxv5.New(b.pool), riverConfig(run.fetch, nil))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("river insert client: %w", err)
		}
		return func(ctx context.Context, tx pgx.Tx, id uuid.UUID, rng *rand.Rand) error {
			order, err := insertOrder(ctx, tx, rng)
			if err != nil {
				return err
			}
			if _, err := client.InsertTx(ctx, tx, benchJobArgs{EventID: id.String(), AggregateID: order.String(), Payload: benchdb.Payload}, nil); err != nil {
				return fmt.Errorf("river insert: %w", err)
			}
			return nil
		}, noop, func() {}, nil
	}
	return nil, nil, nil, fmt.Errorf("unknown peer kind %d", run.kind)
}

// peerRun measures one configuration: a fresh state, the consumer's child, the
// producer, then every event's receipt.
func (b *bench) peerRun(ctx context.Context, run peerRun, rate int) (peerResult, error) {
	if err := b.resetPeers(ctx); err != nil {
		return peerResult{}, err
	}
	body, afterCommit, release, err := b.peerBody(run)
	if err != nil {
		return peerResult{}, err
	}
	defer release()
	res := peerResult{run: run, rate: rate}
	if run.kind == peerAlone {
		lsn0, err := b.walLSN(ctx)
		if err != nil {
			return peerResult{}, err
		}
		ids, _, txs, achieved, err := b.produceLoop(ctx, rate, body, afterCommit)
		if err != nil {
			return peerResult{}, err
		}
		lsn1, err := b.walLSN(ctx)
		if err != nil {
			return peerResult{}, err
		}
		res.events, res.achieved, res.txs, res.walBytes = len(ids), achieved, txs, lsn1-lsn0
		return res, nil
	}
	dir, err := os.MkdirTemp("", "relaybench-peers-")
	if err != nil {
		return peerResult{}, fmt.Errorf("temporary directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cc := childConfig{DSN: b.o.dsn, DB: b.o.database, Instances: 1, Sink: sinkRecord, Receipts: filepath.Join(dir, "receipts")}
	switch run.kind {
	case peerLoop:
		cc.FollowLoop = peerPoll
	case peerRelay:
		cc.Relay = relay.Config{Wakeup: relay.WakeupListen}
	case peerWM:
		cc.Peer, cc.PeerPoll = peerWatermill, run.fetch
	case peerRiverQ:
		cc.Peer, cc.PeerPoll = peerRiver, run.fetch
	}
	c, err := startChild(ctx, cc)
	if err != nil {
		return peerResult{}, err
	}
	lsn0, err := b.walLSN(ctx)
	if err != nil {
		c.kill()
		return peerResult{}, err
	}
	ids, commits, txs, achieved, err := b.produceLoop(ctx, rate, body, afterCommit)
	if err == nil {
		if run.kind == peerLoop || run.kind == peerRelay {
			if err = b.waitPublished(ctx, len(ids)); err == nil {
				err = c.send("STOP")
			}
		} else {
			err = c.send(fmt.Sprintf("EXPECT %d", len(ids)))
		}
	}
	if err != nil {
		c.kill()
		return peerResult{}, err
	}
	cr, err := c.result()
	if err != nil {
		return peerResult{}, err
	}
	res.claims = cr.Stats.Claims + cr.Statements
	lsn1, err := b.walLSN(ctx)
	if err != nil {
		return peerResult{}, err
	}
	res.walBytes = lsn1 - lsn0
	got, dups, err := readReceiptsDups(cc.Receipts)
	if err != nil {
		return peerResult{}, err
	}
	res.events, res.achieved, res.txs = len(ids), achieved, txs
	res.dups = dups
	if err := dumpLatencies(run, rate, ids, commits, got); err != nil {
		return peerResult{}, err
	}
	for i, id := range ids {
		at, ok := got[id]
		if !ok {
			res.lost++
			continue
		}
		res.lat = append(res.lat, time.Duration(at-commits[i]))
	}
	slices.Sort(res.lat)
	return res, nil
}

// dumpEnv names a directory: when set, the peers part writes one file per
// configuration and run there, a line "commit-unix-ns latency-ns" per event (latency
// -1: lost), for finding when a tail's events were committed.
const dumpEnv = "RELAYBENCH_PEERS_DUMP"

func dumpLatencies(run peerRun, rate int, ids []uuid.UUID, commits []int64, got map[uuid.UUID]int64) error {
	dir := os.Getenv(dumpEnv)
	if dir == "" {
		return nil
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, run.name)
	f, err := os.CreateTemp(dir, fmt.Sprintf("%d-%s-*.txt", rate, name))
	if err != nil {
		return fmt.Errorf("latency dump: %w", err)
	}
	var b strings.Builder
	for i, id := range ids {
		lat := int64(-1)
		if at, ok := got[id]; ok {
			lat = at - commits[i]
		}
		fmt.Fprintf(&b, "%d %d\n", commits[i], lat)
	}
	_, werr := f.WriteString(b.String())
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("latency dump: %w", err)
	}
	return nil
}

// readReceiptsDups reads the receipts like readReceipts and also counts the receipts
// of an id seen before (deliveries after the first).
func readReceiptsDups(path string) (map[uuid.UUID]int64, int, error) {
	all, err := os.ReadFile(path) //nolint:gosec // our own temporary file
	if err != nil {
		return nil, 0, fmt.Errorf("read receipts: %w", err)
	}
	got, err := readReceipts(path)
	if err != nil {
		return nil, 0, err
	}
	return got, strings.Count(string(all), "\n") - len(got), nil
}

// walPerEvent is r's WAL per event, producer and consumer together.
func walPerEvent(r peerResult) float64 {
	if r.events == 0 {
		return 0
	}
	return float64(r.walBytes) / float64(r.events)
}

// pooled returns the rounds of one configuration at one rate merged: every latency
// and every transaction time, sorted.
func pooled(results []peerResult, name string, rate int) peerResult {
	var out peerResult
	for _, r := range results {
		if r.run.name != name || r.rate != rate {
			continue
		}
		out.run, out.rate = r.run, r.rate
		out.achieved += r.achieved * float64(r.events) // weighted; divided below
		out.events += r.events
		out.lost += r.lost
		out.dups += r.dups
		out.walBytes += r.walBytes
		out.claims += r.claims
		out.lat = append(out.lat, r.lat...)
		out.txs = append(out.txs, r.txs...)
	}
	if out.events > 0 {
		out.achieved /= float64(out.events)
	}
	slices.Sort(out.lat)
	slices.Sort(out.txs)
	return out
}

func (b *bench) peersReport(runs []peerRun, results []peerResult) partReport {
	var md strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&md, format, args...) }
	p("### Commit → publish latency beside the peers\n\n")
	p("One producer (%d workers, open schedule, %s per configuration) commits one business transaction per event: `%s` (a new uuid order of a random customer) ", producerWorkers, b.o.latencyDuration, benchdb.InsertOrderSQL)
	p("plus the configuration's own write of the event (%d-byte JSON payload) — `outbox.Enqueue` for this relay and the plain loop (the relay's producer calls `Notifier.AfterCommit` after commit), ", len(benchdb.Payload))
	p("watermill-sql's publisher over the transaction decorated by watermill's forwarder publisher, River's `InsertTx` — or nothing (the producer alone). ")
	p("Each consumer runs in a child process: this relay (defaults, ordered, Wakeup listen), the plain-SQL follow loop (10 ms), watermill's forwarder (watermill-sql PostgreSQL subscriber, standard schema and offsets adapters, PollInterval 10ms) forwarding to an in-process publisher, ")
	p("River (default queue, MaxWorkers %d, a worker per job) with its default fetch settings and with FetchCooldown and FetchPollInterval 10ms (on its insert-only client too). ", riverMaxWorkers)
	p("Latency = when the consumer hands the message to its sink/publisher/worker − the time stamped just before the producer sent COMMIT. ")
	p("Every configuration starts from a fresh state and a checkpoint; the set runs %d times, one round after the other. ", b.o.latencyRounds)
	p("Producer ratio: its tx p99 over the producer alone's in the same round. WAL bytes/event: the server's WAL from the producer's start until the consumer stopped (producer and consumer together; the producer alone: its own), per event. Claims/event: this relay's claim transactions (`Stats.Claims`) or the plain loop's statements, per event (the peers' own are not counted). Lost: committed events never received (checked by id); dups: receipts after an event's first. Milliseconds:\n\n")
	p("| rate | round | configuration | events | achieved rate | p50 | p99 | p999 | max | producer tx p99 | × alone | WAL bytes/event | claims/event | lost | dups |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	alone := map[[2]int]peerResult{}
	for _, r := range results {
		if r.run.kind == peerAlone {
			alone[[2]int{r.rate, r.round}] = r
		}
	}
	row := func(r peerResult, round string, base peerResult) {
		achieved := fmt.Sprintf("%.0f", r.achieved)
		ratio := ""
		if len(base.txs) > 0 {
			ratio = fmt.Sprintf("%.2f", float64(percentile(r.txs, 99))/float64(percentile(base.txs, 99)))
		}
		if r.run.kind == peerAlone {
			p("| %d | %s | %s | %d | %s | | | | | %.2f | %s | %.0f | | | |\n", r.rate, round, r.run.name, r.events, achieved, ms(percentile(r.txs, 99)), ratio, walPerEvent(r))
			return
		}
		maxLat := time.Duration(0)
		if len(r.lat) > 0 {
			maxLat = r.lat[len(r.lat)-1]
		}
		claims := ""
		if r.run.kind == peerLoop || r.run.kind == peerRelay {
			claims = fmt.Sprintf("%.2f", float64(r.claims)/float64(r.events))
		}
		p("| %d | %s | %s | %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.0f | %s | %d | %d |\n", r.rate, round, r.run.name, r.events, achieved,
			ms(percentile(r.lat, 50)), ms(percentile(r.lat, 99)), ms(percentile(r.lat, 99.9)), ms(maxLat), ms(percentile(r.txs, 99)), ratio, walPerEvent(r), claims, r.lost, r.dups)
	}
	for _, r := range results {
		row(r, fmt.Sprint(r.round), alone[[2]int{r.rate, r.round}])
	}
	p("\nAll rounds pooled (every event of every round; achieved rate: their mean; the ratio is to the producer alone's pooled tx p99):\n\n")
	p("| rate | rounds | configuration | events | achieved rate | p50 | p99 | p999 | max | producer tx p99 | × alone | WAL bytes/event | claims/event | lost | dups |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var targets []string
	lost := 0
	for _, rate := range b.o.rates {
		base := pooled(results, runs[0].name, rate)
		loop := pooled(results, runs[1].name, rate)
		for _, run := range runs {
			r := pooled(results, run.name, rate)
			lost += r.lost
			row(r, fmt.Sprint(b.o.latencyRounds), base)
			if run.kind == peerRelay && rate == targetLatencyRate && len(loop.lat) > 0 && len(r.lat) > 0 {
				ratio := float64(percentile(r.lat, 99)) / float64(percentile(loop.lat, 99))
				targets = append(targets, fmt.Sprintf("Peers, this relay at %d events/s, p99 ≤ %.1f × the plain-SQL 10 ms follow loop's (pooled, same run): %s — %.2f × (%.2f ms against %.2f ms).",
					rate, targetVsLoop, benchreport.Met(ratio <= targetVsLoop), ratio, ms(percentile(r.lat, 99)), ms(percentile(loop.lat, 99))))
				tx := float64(percentile(r.txs, 99)) / float64(percentile(base.txs, 99))
				targets = append(targets, fmt.Sprintf("Peers, producer tx p99 with this relay at %d events/s ≤ %.1f × the producer alone's (pooled, same run): %s — %.2f × (%.2f ms against %.2f ms).",
					rate, targetProducerTx, benchreport.Met(tx <= targetProducerTx), tx, ms(percentile(r.txs, 99)), ms(percentile(base.txs, 99))))
			}
		}
	}
	if lost == 0 {
		p("\nEvents lost: 0 in every configuration and round (every committed event's id was received).\n")
	} else {
		p("\n**Events lost: %d** (committed, never received within 2 minutes of the producer's end).\n", lost)
		targets = append(targets, fmt.Sprintf("Peers: no event lost: %s — %d lost.", benchreport.Met(false), lost))
	}
	return partReport{md: md.String(), targets: targets}
}

// errNoPeersRounds guards -latency-rounds.
var errNoPeersRounds = errors.New("-latency-rounds: want at least 1")
