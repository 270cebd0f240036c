package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/failpoint"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// batcher runs a relay's batches: claim → publish → classify → settle, each batch one
// transaction (ADR 0004). It holds what a batch needs and nothing of the relay's
// lifecycle; the relay's workers call run.
type batcher struct {
	pool    *pgxpool.Pool
	sink    outbox.Sink
	cfg     *Config
	q       *queries
	log     *slog.Logger
	stats   *counters
	leases  *leaseKeeper // ordered mode: the partitions a batch may claim
	owner   string
	breaker *breaker
	// rotations keep where each worker's last ordered claims stopped, per aggregate
	// type (a worker claims from its own partitions: workerShare)
	rotations []rotation
	// floor keeps the seq the claims read the pending rows from (claim_floor.sql)
	floor floor
	// claimedFull is called when a worker's claim came back full (deep: an aggregate
	// reached its cut), wentOn when a batch went on without a slow call: either may bring
	// an idle worker in (Relay.claimedFull, Relay.peerWanted); released when a late
	// settle made aggregates claimable again.
	claimedFull      func(worker int, deep bool)
	wentOn, released func()

	// sessionSettings are set in every claim transaction, before claimSettings: the
	// idle-in-transaction timeout, and synchronous_commit unless
	// Config.SynchronousCommit.
	sessionSettings []string

	// nextDue is the earliest time (unix ns) a pending row the relay knows of comes due
	// (a retry it scheduled, rows it holds in flight, a scheduled event a claim or the
	// probe saw: claim_seen.sql); an idle relay looks again then. 0: none.
	nextDue atomic.Int64
	// narrow halves the next claims' sizes this many times, after claims that failed
	// with no single row to blame (poison.go); succeeded counts the claims that
	// succeeded since the last narrowing.
	narrow    atomic.Int32
	succeeded atomic.Int32

	// late runs the settling of Publish calls that outlived their batch; the relay
	// waits for it before it stops.
	late sync.WaitGroup
	// callTimes: how long the sink's Publish calls usually take (publish's cut-off)
	callTimes callTimes
	// cuts hold, per worker, whether a batch of the worker that went on without every
	// one of its Publish calls is still waiting for them (publish)
	cuts []atomic.Bool
	// claimSizes: how many rows each worker's last claim returned (readClaimed's slices)
	claimSizes claimSizes
	// rates bound the claims of the types of Config.TypeRates (nil: none)
	rates *typeRates
}

func newBatcher(pool *pgxpool.Pool, sink outbox.Sink, cfg *Config, q *queries, log *slog.Logger, stats *counters, leases *leaseKeeper, owner string, workers int, claimedFull func(worker int, deep bool), wentOn, released func()) *batcher {
	// A claim transaction is idle while the sink publishes; past the batch's budget plus
	// a margin the server ends it, so a stopped relay cannot hold row locks for long.
	iit := cfg.BatchTimeout + 30*time.Second
	b := &batcher{
		pool: pool, sink: sink, cfg: cfg, q: q, log: log, stats: stats, leases: leases, owner: owner,
		breaker: newBreaker(cfg.BreakerInitialDelay, cfg.BreakerMaxDelay), claimedFull: claimedFull, wentOn: wentOn, released: released,
		rotations:       make([]rotation, max(1, workers)),
		cuts:            make([]atomic.Bool, max(1, workers)),
		claimSizes:      newClaimSizes(workers),
		sessionSettings: []string{fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", iit.Milliseconds())},
		rates:           newTypeRates(cfg.TypeRates),
	}
	if !cfg.SynchronousCommit {
		// A lost mark means a duplicate, never a loss (the event is published again), so
		// the batch's commit need not wait for its WAL to reach disk: on a busy server
		// that wait was one more flush per batch competing with the producers' commits.
		b.sessionSettings = append(b.sessionSettings, "SET LOCAL synchronous_commit = off")
	}
	return b
}

// giveUp rolls back the claim of a batch whose leases moved on, then wakes the schema's
// relays: the new owner's claims passed over the rows this batch held locked, found
// nothing there, and may be waiting for their poll.
func (b *batcher) giveUp(ctx context.Context, tx *batchTx) error {
	err := tx.rollback(ctx)
	p := sqlq.NotifyParams{Channel: outbox.WakeupChannel(b.cfg.Schema)}
	if _, nerr := b.pool.Exec(ctx, b.q.notify.SQL, b.q.notify.Args(&p)...); nerr != nil {
		b.log.WarnContext(ctx, "wake the relays after a fenced batch", slog.Any("error", nerr))
	}
	return err
}

// batchResult counts what one batch did. full: the claim took as much as it may (more
// may be waiting). down: the sink was down, and the batch's rows went back untouched
// (still claimable). taken: a by-seq batch's claimed seqs. parts: in ordered mode, the
// worker's share of the relay partitions when the batch claimed (claimedParts.dealt).
type batchResult struct {
	claimed, published, retried, dead int
	full, down                        bool
	taken                             []int64
	parts                             []int
}

// run claims, publishes and settles one batch: in ordered mode from the worker's share of
// the relay partitions the relay leases, in unordered mode from all. With seqs, the batch
// claims only among the rows they name (claimSeqs), and res.taken lists those it claimed.
func (b *batcher) run(ctx context.Context, share workerShare, seqs []int64) (batchResult, error) {
	relayCtx := ctx // outlives the batch: Publish calls still running after it use it
	start := time.Now()
	var res batchResult
	var (
		parts  []int
		epochs []int64
	)
	scope := b.scope(nil, share)
	// idle marks the batch's partitions no longer busy (claimable's done): when the batch
	// ends, or, when it hands Publish calls to settleLate, when their settle ends — a
	// partition being given back to a joining relay is handed over only then, so the
	// new owner does not find its rows held in flight, claim past them and go idle
	idle, txEnded := func() {}, func() {}
	defer func() { idle() }()
	if b.cfg.Mode == Ordered {
		c := b.leases.claimable(time.Now(), share)
		parts, epochs, idle, txEnded = c.parts, c.epochs, c.done, c.ended
		res.parts = c.dealt
		if len(parts) == 0 {
			return res, nil
		}
		scope = b.scope(parts, share)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout+10*time.Second)
	defer cancel()
	tx, err := b.begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.end()

	var c claimedBatch
	if seqs != nil {
		// a failed by-seq claim leaves its rows pending, to the polling claims, which
		// isolate a poison row and narrow their size as they need
		if c, err = b.claimSeqs(ctx, tx, scope, seqs); err != nil {
			return res, err
		}
		res.taken = c.seqs()
	} else {
		c, err = b.claim(ctx, tx, scope)
		b.stats.claims.Add(1)
		if err != nil {
			return b.claimFailed(ctx, tx, scope, err)
		}
		b.widenClaims()
	}
	msgs, bad := c.msgs, c.bad
	res.claimed, res.full = len(msgs)+len(bad)+len(c.skipped), c.full
	if res.claimed == 0 {
		return res, nil
	}
	// A backlog found: bring an idle peer in to claim the next batch while this one is
	// published, so one wake-up (a notification, Wake) sets every worker to a backlog,
	// not just the one it reached. Not after a claim that took less than it may (it took
	// what there was: the peer's claim would find nothing), nor for a by-seq batch (its
	// source names the next).
	if seqs == nil && c.full {
		b.claimedFull(share.index, c.deep)
	}
	if err := failpoint.Inject(failpoint.AfterClaim); err != nil {
		return res, err
	}
	// A relay paused past its lease (a zombie) must not publish: another relay may own
	// these partitions by now. Judged by the local monotonic clock, with a margin.
	if b.cfg.Mode == Ordered && !b.leases.valid(parts, epochs, time.Now()) {
		b.stats.abandonedBatches.Add(1)
		return res, b.giveUp(ctx, tx)
	}

	var (
		results published
		running *inFlight // calls still running: their messages are settled after the batch
	)
	publishStart := time.Now()
	if len(msgs) > 0 {
		// A by-seq batch waits for one of its calls before it goes on without the others,
		// as before ADR 0033: its source confirms what it settled, and rows held in
		// flight would move an unanswered event's fate from the source to the hold.
		// Nor does a batch while the breaker is open: as the breaker's probe, it waits for
		// a verdict on the sink rather than leave its calls in flight undecided.
		var cut *atomic.Bool
		if seqs == nil && !b.breaker.open() {
			cut = &b.cuts[share.index%len(b.cuts)]
		}
		results, running, err = b.publish(relayCtx, msgs, cut)
		// A batch that ends without holding the rows of the calls still running (it
		// rolls back, is fenced, fails, or finds the sink down) cancels those calls and
		// waits for them before its transaction ends: once it has, another claim may
		// take the rows, and no two calls may be in flight for one aggregate. A batch
		// that holds them hands the calls to settleLate and sets running to nil.
		defer b.endCalls(&running)
		if err != nil {
			b.breaker.down(time.Now())
			return res, err
		}
		if running != nil && seqs == nil && b.cfg.Mode == Ordered {
			// it goes on without slow calls: bring a peer in, as for a full claim (an
			// ordered relay that is not busy claims with one worker, ADR 0035)
			b.wentOn()
		}
	}
	if err := failpoint.Inject(failpoint.AfterPublish); err != nil {
		return res, err
	}

	returned, returnedResults := msgs, results
	var heldMS int64
	if running != nil {
		returned, returnedResults = results.without(msgs, running.msgs)
		// Held in flight until the calls' budget has run out, and a margin.
		heldMS = (b.cfg.BatchTimeout - time.Since(publishStart) + heldMargin).Milliseconds()
	}
	out, down := b.classify(returned, returnedResults)
	if down {
		b.endCalls(&running) // their rows go back untouched, whether it commits or not
		if b.breaker.down(time.Now()) {
			b.stats.breakerOpens.Add(1)
			b.log.WarnContext(ctx, "sink down: breaker open; no attempts counted", slog.Any("error", firstError(results.errs)))
		}
		b.stats.sinkDownBatches.Add(1)
		res.down = true
		if len(bad) == 0 {
			return res, tx.rollback(ctx)
		}
	}
	for _, r := range bad {
		out.add(r.msg.Seq, outcomeDead, &r.reason, 0)
		out.dead++
		out.deadMsgs = append(out.deadMsgs, deadMsg(r))
	}
	if running != nil {
		for _, i := range running.msgs {
			out.add(msgs[i].Seq, outcomeHeld, nil, heldMS)
		}
	}
	if err := failpoint.Inject(failpoint.BeforeMark); err != nil {
		return res, err
	}
	// The claim marked (or deleted) every row as published: settle puts back the others.
	txStart, fenced, err := b.commit(ctx, tx, b.settleArgs(c, out), parts, epochs, running != nil)
	if err != nil {
		return res, err
	}
	if fenced {
		// A lease moved on while the batch was out (this relay paused past it): the new
		// owner publishes these events again (duplicates); nothing of the batch is kept.
		b.stats.fencedWrites.Add(int64(res.claimed))
		b.log.WarnContext(ctx, "batch fenced: lease taken over", slog.Int("events", res.claimed))
		b.endCalls(&running)
		return res, b.giveUp(ctx, tx)
	}
	switch {
	case out.published > 0:
		b.breaker.success()
	case !down:
		b.breaker.inconclusive()
	}
	res.published, res.retried, res.dead = out.published, out.retried, out.dead
	b.noteDue(out.earliestRetry)
	b.stats.add(res)
	if b.cfg.Observer != nil {
		observed := returned
		for _, r := range bad {
			observed = append(observed[:len(observed):len(observed)], r.msg)
		}
		b.observe(start, false, observed, &out)
	}
	if running != nil {
		held := heldRows{msgs: msgs, p: results, running: running, until: txStart.Add(time.Duration(heldMS) * time.Millisecond), parts: parts, epochs: epochs}
		b.noteDue(held.until) // if the late settle fails, the rows are claimable again then
		running = nil         // settleLate waits for them now
		txEnded()             // committed: a sibling may claim these partitions now, not their held rows
		lateIdle := idle
		idle = func() {}
		b.late.Go(func() {
			defer lateIdle()
			b.settleLate(relayCtx, held)
		})
	}
	for _, d := range out.deadMsgs {
		b.log.WarnContext(ctx, "event dead", slog.String("event_id", d.msg.ID.String()), slog.String("event_type", d.msg.EventType),
			slog.String("aggregate_type", d.msg.AggregateType), slog.String("aggregate_id", d.msg.AggregateID),
			slog.Int("attempt", d.msg.Attempt), slog.String("error", d.reason))
	}
	return res, nil
}

// endCalls cancels the Publish calls *running still runs, if any, waits until they have
// returned, and forgets them.
func (b *batcher) endCalls(running **inFlight) {
	if *running == nil {
		return
	}
	(*running).cancel()
	<-(*running).done
	*running = nil
}

// claimScope is what one worker's claim reads from.
type claimScope struct {
	// parts are the relay partitions a claim filters on; nil: all of them (no filter)
	parts []int
	// rotation is where the worker's last ordered claims stopped
	rotation *rotation
	// worker is the claiming worker's index (its floor's full claims are its own)
	worker int
	// lane: the aggregate types the worker claims
	lane lane
}

// laneTypes returns the aggregate types a claim of lane ln is limited to (only; nil:
// every type) and those it leaves out (skip; nil: none).
func (b *batcher) laneTypes(ln lane) (only, skip []string) {
	switch ln {
	case laneIsolated:
		return b.cfg.IsolatedTypes, nil
	case laneOthers:
		return nil, b.cfg.IsolatedTypes
	}
	return nil, nil
}

// scope returns the claim scope of worker share over the relay partitions parts (nil or
// all of them: no filter).
func (b *batcher) scope(parts []int, share workerShare) claimScope {
	s := claimScope{parts: parts, rotation: &b.rotations[min(share.index, len(b.rotations)-1)], worker: share.index, lane: share.lane}
	if len(parts) == b.cfg.Partitions {
		s.parts = nil
	}
	return s
}

// ready answers, with one cheap query, whether an idle relay has anything to claim, and
// when askBacklog whether it is a backlog (more than 64 rows ready in the share).
func (b *batcher) ready(ctx context.Context, share workerShare, askBacklog bool) (ready, backlog bool, err error) {
	var scope []int
	if b.cfg.Mode == Ordered {
		c := b.leases.claimable(time.Now(), share)
		c.done()
		if len(c.parts) == 0 {
			return false, false, nil
		}
		scope = b.scope(c.parts, share).parts
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	defer cancel()
	var (
		minPending *int64
		due        *time.Duration
		saw        seen
	)
	fa := b.floor.args(time.Now(), share.index)
	p := probeParams{Floor: fa.floor, Replays: fa.replays, Scope: scope, Partitions: b.cfg.Partitions, Backlog: askBacklog}
	p.OnlyTypes, p.SkipTypes = b.laneTypes(share.lane)
	if rates := b.rateAllowance(b.cfg.MaxPerAggregate); len(rates.skip) > 0 {
		// the types their rates leave out are not work: their time comes as nextDue
		p.SkipTypes = slices.Concat(p.SkipTypes, rates.skip)
		b.rateHeld(rates.skip)
	}
	if err := b.pool.QueryRow(ctx, b.q.probe.SQL, b.q.probe.Args(&p)...).
		Scan(&ready, &backlog, &minPending, &saw.xmin, &saw.xmax, &saw.replays, &due); err != nil {
		return false, false, fmt.Errorf("probe for work: %w", err)
	}
	if minPending != nil {
		saw.minPending = *minPending
	}
	b.floor.observe(fa, saw, time.Now())
	if due != nil {
		b.noteDue(fa.sent.Add(*due))
	}
	return ready, backlog, nil
}

// probeParams holds the parameters of probe.sql, bound by name.
type probeParams struct {
	Floor      int64    `sql:"floor"`
	Replays    int64    `sql:"replays"`
	Scope      []int    `sql:"scope"` // nil: all
	Partitions int      `sql:"partitions"`
	Backlog    bool     `sql:"backlog"`    // whether to answer backlog
	OnlyTypes  []string `sql:"only_types"` // the lane's types (nil: all)
	SkipTypes  []string `sql:"skip_types"` // the types of another lane (nil: none)
}

// genericPlans makes the rest of a transaction's prepared statements run on their generic
// plans.
const genericPlans = "SET LOCAL plan_cache_mode = force_generic_plan"

// settleAttempts bounds the retries of a settle statement that hit a serialization
// failure or a deadlock.
const settleAttempts = 3

// commit ends a published batch, in one round trip, and returns (with wantStart) the
// transaction's start time, the database's now(): in ordered mode a check that every
// lease the batch was claimed under is still held at its epoch, locking the lease rows
// FOR SHARE until the commit (fence.sql; fenced reports that one moved on, the COMMIT
// does not run, and the caller rolls the batch back); with back (the settle statement's
// arguments; nil: everything went out) the settle statement, which puts back the rows
// whose messages were not published; then COMMIT. The settle statement runs behind a
// savepoint: a serialization failure or deadlock (40001, 40P01) rolls back to it,
// keeping the claim's row locks, and it is retried, so the batch is not published a
// second time.
func (b *batcher) commit(ctx context.Context, tx *batchTx, back []any, parts []int, epochs []int64, wantStart bool) (txStart time.Time, fenced bool, err error) {
	for attempt := 1; ; attempt++ {
		batch := &pgx.Batch{}
		if wantStart {
			batch.Queue("SELECT now()")
		}
		if back != nil {
			batch.Queue("SAVEPOINT outbox_settle")
		}
		if b.cfg.Mode == Ordered {
			// The fence and the settle after it run on their generic plans. Left to the
			// server's choice, a fence over a few of many partitions (one relay of
			// several) was planned afresh on every batch, its custom plan estimated
			// cheaper: 0.15 ms of planning per batch, more than its run.
			batch.Queue(genericPlans)
			batch.Queue(b.q.fence.SQL, b.q.fence.Args(&fenceParams{Owner: b.owner, Partitions: parts, Epochs: epochs})...)
		}
		if back != nil {
			batch.Queue(b.q.settle, back...)
		}
		batch.Queue("COMMIT")
		br := tx.send(ctx, batch)
		n := batch.Len()
		if wantStart {
			err = br.QueryRow().Scan(&txStart)
			n--
		}
		for range n {
			if err != nil {
				break
			}
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		switch {
		case err == nil:
			tx.committed()
			return txStart, false, nil
		case errFenced(err):
			return txStart, true, nil
		}
		var pgErr *pgconn.PgError
		if back == nil || !errors.As(err, &pgErr) || (pgErr.Code != "40001" && pgErr.Code != "40P01") || attempt == settleAttempts {
			return txStart, false, fmt.Errorf("commit batch: %w", err)
		}
		b.stats.settleRetries.Add(1)
		if _, rerr := tx.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT outbox_settle"); rerr != nil {
			return txStart, false, fmt.Errorf("commit batch: %w (and rolling back to the savepoint: %w)", err, rerr)
		}
	}
}

// noteDue records when a pending row comes due (a retry a batch scheduled, held rows, a
// scheduled event), if sooner than the one known, forgetting one already due.
func (b *batcher) noteDue(earliest time.Time) {
	now := time.Now().UnixNano()
	for {
		cur := b.nextDue.Load()
		next := cur
		if cur != 0 && cur <= now {
			next = 0
		}
		if !earliest.IsZero() && (next == 0 || earliest.UnixNano() < next) {
			next = earliest.UnixNano()
		}
		if next == cur || b.nextDue.CompareAndSwap(cur, next) {
			return
		}
	}
}
