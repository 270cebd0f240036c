// Package relay publishes committed outbox events to a [outbox.Sink]: it claims a
// bounded batch of pending events (row locks held in a claim transaction), publishes
// them, and records each outcome — published, retry later, or dead — in the same
// transaction. A crash anywhere in between rolls the claim back, so the events are
// published again: at least once, never lost.
//
// In Ordered mode (the default) an event is claimed only when it is its aggregate's
// head, so the first delivery of each event of one aggregate follows write order, also
// when a publish fails mid-batch. Failures are sorted into permanent (dead at once),
// transient for one message (retried with backoff, dead when the attempt budget is
// spent) and sink down (a breaker opens; nothing counts an attempt).
package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/failpoint"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// Relay publishes the events of one outbox schema to one sink. Create it with [New]
// and start it with [Relay.Run].
type Relay struct {
	pool    *pgxpool.Pool
	sink    outbox.Sink
	cfg     Config
	log     *slog.Logger
	breaker *breaker
	wake    chan struct{}
	stats   counters
	crashed atomic.Bool // a simulated crash (failpoint): leases are abandoned, not released
	// nextRetry is the earliest retry (unix ns) this relay scheduled that may still be
	// pending; an idle relay looks again then. 0: none.
	nextRetry atomic.Int64

	// owner identifies this relay in leases and relay_members: random per relay.
	owner         string
	leases        leaseSet
	leaseWake     chan struct{}
	wakeupChannel string
	listener      *listener // nil with Config.Wakeup WakeupPoll

	q          queries
	iitTimeout string
	heads      headHint // ordered mode

	// shareWorkers: Unordered mode with Concurrency unset, so the relays of the schema
	// share the default batches in flight (sharedWorkers). workers is how many of the
	// Concurrency workers run batches now; the others wait.
	shareWorkers bool
	workers      atomic.Int32

	// narrow halves the next claims' sizes this many times, after claims that failed
	// with no single row to blame (poison.go).
	narrow atomic.Int32
	// succeeded counts the claims that succeeded since the last narrowing.
	succeeded atomic.Int32
}

// queries holds the relay's SQL rendered for its schema.
type queries struct {
	claim, fence, config        string
	unclaim                     string // unclaim_keep or unclaim_delete
	purge, purgeNext, purgeLock string
	leaseInit, leaseBeat        string
	leaseAcquire, probe         string
	leaseRelease                string
	leaseNextExpiry             string
	// a claim that failed on a row's content: poison.go
	poisonCandidates, poisonTry, poisonPark, poisonBySize string
}

func newQueries(quoted, claim, unclaim, candidates, try string) queries {
	q := func(name string) string { return sqlq.Query(name, quoted) }
	return queries{
		poisonCandidates: q(candidates), poisonTry: q(try), poisonPark: q("poison_park"), poisonBySize: q("poison_by_size"),
		claim: q(claim), fence: q("fence"), config: q("relay_config"), unclaim: q(unclaim),
		purge: q("purge"), purgeNext: q("purge_next"), purgeLock: q("purge_lock"),
		leaseInit: q("lease_init"), leaseBeat: q("lease_beat"), probe: q("probe"),
		leaseAcquire: q("lease_acquire"), leaseRelease: q("lease_release"), leaseNextExpiry: q("lease_next_expiry"),
	}
}

// New returns a relay publishing from the schema in cfg (nil: defaults) to sink.
func New(pool *pgxpool.Pool, sink outbox.Sink, cfg *Config) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("relay: pool is nil")
	}
	if sink == nil {
		return nil, errors.New("relay: sink is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	maxConns := int(pool.Config().MaxConns)
	shareWorkers := c.Mode == Unordered && (cfg == nil || cfg.Concurrency == 0)
	if shareWorkers {
		c.Concurrency = min(2, max(1, maxConns/2))
	}
	if c.Concurrency > maxConns {
		return nil, fmt.Errorf("relay config: Concurrency %d is more than the pool's MaxConns %d: batches would wait for each other's connections", c.Concurrency, maxConns)
	}
	quoted, err := sqlq.QuoteSchema(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("relay config: Schema: %w", err)
	}
	// The claim statement marks (or deletes) what it claims as published; what the sink
	// does not take is put back before the commit (ADR 0004).
	claim, unclaim, candidates, try := "claim_ordered", "unclaim_keep", "poison_candidates_ordered", "poison_try_keep"
	if c.Mode == Unordered {
		claim, candidates = "claim_unordered", "poison_candidates_unordered"
	}
	if c.Retention.Mode == DeleteOnPublish {
		claim, unclaim, try = claim+"_delete", "unclaim_delete", "poison_try_delete"
	}
	// A claim transaction is idle while the sink publishes; past the batch's budget plus
	// a margin the server ends it, so a stopped relay cannot hold row locks for long.
	iit := c.BatchTimeout + 30*time.Second
	r := &Relay{
		pool:          pool,
		sink:          sink,
		cfg:           c,
		log:           c.Logger.With(slog.String("schema", c.Schema)),
		breaker:       newBreaker(c.BreakerInitialDelay, c.BreakerMaxDelay),
		wake:          make(chan struct{}, 1),
		owner:         uuid.NewString(),
		leases:        leaseSet{owned: map[int]*lease{}, handBack: make(chan struct{}, 1)},
		leaseWake:     make(chan struct{}, 1),
		wakeupChannel: outbox.WakeupChannel(c.Schema),
		q:             newQueries(quoted, claim, unclaim, candidates, try),
		iitTimeout:    fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", iit.Milliseconds()),
		shareWorkers:  shareWorkers && c.Concurrency > 1,
	}
	r.workers.Store(int32(c.Concurrency))
	if c.Wakeup == WakeupListen {
		r.listener = newListener(pool, c.Schema, r.Wake, r.notified, r.log)
	}
	return r, nil
}

// Wake asks the relay to look for work (and, in ordered mode, for free leases) now
// rather than after its poll interval. It never blocks; wake-ups coalesce.
func (r *Relay) Wake() {
	signal(r.wake)
	signal(r.leaseWake)
}

// Owner returns the id this relay uses in the leases and relay_members tables.
func (r *Relay) Owner() string { return r.owner }

// ErrConfigMismatch is returned by Run when relay_config records another mode or
// partition count than this relay's.
var ErrConfigMismatch = errors.New("relay settings differ from relay_config")

// Run publishes until ctx is cancelled, then stops claiming, lets in-flight batches
// finish within Config.ShutdownTimeout (abandoning them after that: their events stay
// pending), and returns nil. It returns an error when it cannot start (settings that
// differ from relay_config) or when a batch fails in a way that calls for a restart.
// Call Run once per Relay.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.checkConfig(ctx); err != nil {
		return err
	}
	// Batches run on hard, which outlives ctx by ShutdownTimeout.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(r.cfg.ShutdownTimeout, hardCancel) })
	defer stop()

	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail, failCancel := context.WithCancel(ctx)
	defer failCancel()
	// Leases outlive the workers: they are released only after in-flight batches settle.
	leaseCtx, leaseCancel := context.WithCancel(context.WithoutCancel(ctx))
	var leaseWG sync.WaitGroup
	if r.cfg.Mode == Ordered || r.shareWorkers {
		leaseWG.Go(func() { r.leaseLoop(leaseCtx) })
	}
	for worker := range r.cfg.Concurrency {
		wg.Go(func() {
			if err := r.work(fail, hard, worker); err != nil {
				errOnce.Do(func() { firstErr = err; failCancel() })
			}
		})
	}
	if r.cfg.Retention.Mode != DeleteOnPublish {
		wg.Go(func() { r.retain(fail) })
	}
	if r.listener != nil {
		wg.Go(func() { r.listener.run(fail) })
	}
	wg.Wait()
	if errors.Is(firstErr, failpoint.ErrCrash) {
		r.abandonLeases() // a simulated crash releases nothing
	}
	leaseCancel()
	leaseWG.Wait()
	return firstErr
}

func (r *Relay) checkConfig(ctx context.Context) error {
	var (
		mode       string
		partitions int
	)
	// Two relays starting on a fresh schema race to insert the row: the loser's INSERT
	// waits, does nothing, and its snapshot cannot see the winner's row yet; asking again
	// (a new statement, a new snapshot) finds it.
	var err error
	for range 3 {
		err = r.pool.QueryRow(ctx, r.q.config, string(r.cfg.Mode), r.cfg.Partitions).Scan(&mode, &partitions)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("relay: read relay_config: %w", err)
	}
	if Mode(mode) != r.cfg.Mode || partitions != r.cfg.Partitions {
		return fmt.Errorf("relay: %w: this relay has mode=%s partitions=%d, relay_config has mode=%s partitions=%d; mixing them would break order — change relay_config only when every relay is stopped",
			ErrConfigMismatch, r.cfg.Mode, r.cfg.Partitions, mode, partitions)
	}
	return nil
}

// work runs batches, as worker number worker, until ctx is done. Batches use hard, so
// one in flight when ctx is cancelled can still finish.
func (r *Relay) work(ctx, hard context.Context, worker int) error {
	probe := false // idle and not woken: ask cheaply before claiming
	woken := false // the last idle wait ended on a wake-up
	for ctx.Err() == nil {
		if worker >= int(r.workers.Load()) { // other relays share the default: wait
			if woken { // it went idle before it had to wait: pass the wake-up on
				signal(r.wake)
			}
			woken = false
			r.sleep(ctx, r.cfg.LeaseTTL/3, false)
			continue
		}
		woken = false
		if ok, wait := r.breaker.acquire(time.Now()); !ok {
			r.sleep(ctx, wait, false)
			continue
		}
		if probe {
			ready, err := r.workReady(hard)
			if err == nil && !ready {
				r.breaker.inconclusive()
				woken = r.sleep(ctx, r.idleWait(), true)
				probe = !woken
				continue
			}
		}
		res, err := r.runBatch(hard)
		switch {
		case errors.Is(err, failpoint.ErrCrash):
			return err
		case err != nil:
			r.breaker.inconclusive()
			if hard.Err() != nil {
				return nil // shut down mid-batch: abandoned, events stay pending
			}
			r.stats.errors.Add(1)
			r.log.WarnContext(ctx, "batch failed", slog.Any("error", err))
			r.sleep(ctx, r.cfg.PollInterval, false)
			probe = false
		case res.claimed == 0:
			r.breaker.inconclusive()
			woken = r.sleep(ctx, r.idleWait(), true)
			probe = !woken
		default:
			probe = false
		}
	}
	return nil
}

// signal sends on c without blocking; signals coalesce.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// idleWait is how long an idle relay waits for a wake-up before looking again.
func (r *Relay) idleWait() time.Duration {
	idle := r.cfg.PollInterval
	if r.listener.isListening() {
		idle = r.cfg.FallbackPollInterval
	}
	// Retries this relay scheduled come due without any notification.
	if due := r.nextRetry.Load(); due != 0 {
		idle = min(idle, max(time.Until(time.Unix(0, due)), time.Millisecond))
	}
	return idle
}

// sleep waits d, or until ctx is done, or (when wakeable) until Wake is called.
// It reports whether a wake-up (or cancellation) ended the wait early.
func (r *Relay) sleep(ctx context.Context, d time.Duration, wakeable bool) (woken bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = r.wake
	}
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return false
	case <-wake:
		return true
	}
}

// scope returns parts, the relay partitions a query filters on, or nil when they are
// all of them (no filter needed).
func (r *Relay) scope(parts []int) []int {
	if len(parts) == r.cfg.Partitions {
		return nil
	}
	return parts
}

// workReady answers, with one cheap query, whether an idle relay has anything to claim.
func (r *Relay) workReady(ctx context.Context) (bool, error) {
	var scope []int
	if r.cfg.Mode == Ordered {
		parts, _, done := r.leases.claimable(time.Now())
		done()
		if len(parts) == 0 {
			return false, nil
		}
		scope = r.scope(parts)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.BatchTimeout)
	defer cancel()
	var ready bool
	if err := r.pool.QueryRow(ctx, r.q.probe, scope, r.cfg.Partitions).Scan(&ready); err != nil {
		return false, fmt.Errorf("probe for work: %w", err)
	}
	return ready, nil
}

// settleAttempts bounds the retries of a put-back that hit a serialization failure or a
// deadlock.
const settleAttempts = 3

// commit ends a published batch, in one round trip: in ordered mode a check that every
// lease the batch was claimed under is still held at its epoch, locking the lease rows
// FOR SHARE until the commit (fence.sql; fenced reports that one moved on, the COMMIT
// does not run, and the caller rolls the batch back); with back (unclaim's arguments;
// nil: everything went out) the put-back of the rows whose messages were not published;
// then COMMIT. A put-back runs behind a savepoint: a serialization failure or deadlock
// (40001, 40P01) rolls back to it, keeping the claim's row locks, and it is retried, so
// the batch is not published a second time.
func (r *Relay) commit(ctx context.Context, tx *batchTx, back []any, parts []int, epochs []int64) (fenced bool, err error) {
	for attempt := 1; ; attempt++ {
		b := &pgx.Batch{}
		if back != nil {
			b.Queue("SAVEPOINT outbox_settle")
		}
		if r.cfg.Mode == Ordered {
			b.Queue(r.q.fence, r.owner, parts, epochs)
		}
		if back != nil {
			b.Queue(r.q.unclaim, back...)
		}
		b.Queue("COMMIT")
		br := tx.send(ctx, b)
		for range b.Len() {
			if _, err = br.Exec(); err != nil {
				break
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		switch {
		case err == nil:
			tx.committed()
			return false, nil
		case errFenced(err):
			return true, nil
		}
		var pgErr *pgconn.PgError
		if back == nil || !errors.As(err, &pgErr) || (pgErr.Code != "40001" && pgErr.Code != "40P01") || attempt == settleAttempts {
			return false, fmt.Errorf("commit batch: %w", err)
		}
		r.stats.settleRetries.Add(1)
		if _, rerr := tx.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT outbox_settle"); rerr != nil {
			return false, fmt.Errorf("commit batch: %w (and rolling back to the savepoint: %w)", err, rerr)
		}
	}
}

// noteRetries records the earliest retry a batch scheduled, forgetting one already due.
func (r *Relay) noteRetries(earliest time.Time) {
	now := time.Now().UnixNano()
	for {
		cur := r.nextRetry.Load()
		next := cur
		if cur != 0 && cur <= now {
			next = 0
		}
		if !earliest.IsZero() && (next == 0 || earliest.UnixNano() < next) {
			next = earliest.UnixNano()
		}
		if next == cur || r.nextRetry.CompareAndSwap(cur, next) {
			return
		}
	}
}

// batchResult counts what one batch did.
type batchResult struct{ claimed, published, retried, dead int }

// runBatch claims, publishes and settles one batch: in ordered mode from the relay
// partitions this relay leases, in unordered mode from all.
func (r *Relay) runBatch(ctx context.Context) (batchResult, error) {
	var res batchResult
	var (
		parts  []int
		epochs []int64
		scope  []int // relay partitions to claim from; nil: all
	)
	if r.cfg.Mode == Ordered {
		var done func()
		parts, epochs, done = r.leases.claimable(time.Now())
		defer done()
		if len(parts) == 0 {
			return res, nil
		}
		scope = r.scope(parts)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.BatchTimeout+10*time.Second)
	defer cancel()
	tx, err := r.beginBatch(ctx)
	if err != nil {
		return res, err
	}
	defer tx.end()

	c, err := r.claim(ctx, tx, scope)
	if err != nil {
		return r.claimFailed(ctx, tx, scope, err)
	}
	r.widenClaims()
	msgs, bad := c.msgs, c.bad
	res.claimed = len(msgs) + len(bad) + len(c.skipped)
	if res.claimed == 0 {
		return res, nil
	}
	// Work found: bring an idle peer in to claim the next batch while this one is
	// published, so one wake-up (a notification, Wake) sets every worker to a backlog,
	// not just the one it reached.
	if r.workers.Load() > 1 {
		signal(r.wake)
	}
	if err := failpoint.Inject(failpoint.AfterClaim); err != nil {
		return res, err
	}
	// A relay paused past its lease (a zombie) must not publish: another relay may own
	// these partitions by now. Judged by the local monotonic clock, with a margin.
	if r.cfg.Mode == Ordered && !r.leases.valid(parts, epochs, time.Now()) {
		r.stats.abandonedBatches.Add(1)
		return res, tx.rollback(ctx)
	}

	var results published
	if len(msgs) > 0 {
		results, err = r.publish(ctx, msgs)
		if err != nil {
			r.breaker.down(time.Now())
			return res, err
		}
	}
	if err := failpoint.Inject(failpoint.AfterPublish); err != nil {
		return res, err
	}

	out, down := r.outcomes(msgs, results)
	if down {
		if r.breaker.down(time.Now()) {
			r.stats.breakerOpens.Add(1)
			r.log.WarnContext(ctx, "sink down: breaker open; no attempts counted", slog.Any("error", firstError(results.errs)))
		}
		r.stats.sinkDownBatches.Add(1)
		if len(bad) == 0 {
			return res, tx.rollback(ctx)
		}
	}
	for _, b := range bad {
		out.add(b.msg.Seq, "dead", &b.reason, 0)
		out.dead++
		out.deadMsgs = append(out.deadMsgs, deadMsg(b))
	}
	if err := failpoint.Inject(failpoint.BeforeMark); err != nil {
		return res, err
	}
	// The claim marked (or deleted) every row as published: put back the others.
	fenced, err := r.commit(ctx, tx, r.unclaimArgs(c, out), parts, epochs)
	if err != nil {
		return res, err
	}
	if fenced {
		// A lease moved on while the batch was out (this relay paused past it): the new
		// owner publishes these events again (duplicates); nothing of the batch is kept.
		r.stats.fencedWrites.Add(int64(res.claimed))
		r.log.WarnContext(ctx, "batch fenced: lease taken over", slog.Int("events", res.claimed))
		return res, tx.rollback(ctx)
	}
	switch {
	case out.published > 0:
		r.breaker.success()
	case !down:
		r.breaker.inconclusive()
	}
	res.published, res.retried, res.dead = out.published, out.retried, out.dead
	r.noteRetries(out.earliestRetry)
	r.stats.add(res)
	for _, d := range out.deadMsgs {
		r.log.WarnContext(ctx, "event dead", slog.String("event_id", d.msg.ID.String()), slog.String("event_type", d.msg.EventType),
			slog.String("aggregate_type", d.msg.AggregateType), slog.String("aggregate_id", d.msg.AggregateID),
			slog.Int("attempt", d.msg.Attempt), slog.String("error", d.reason))
	}
	return res, nil
}

// claimedBatch is what a claim statement claimed (and marked published or deleted).
type claimedBatch struct {
	msgs    []outbox.Message // to publish, in seq order
	bad     []badRow         // undecodable rows: dead
	skipped []outbox.Message // ordered mode: after an undecodable row of their aggregate; put back untouched
	// rows holds, in delete-on-publish, what unclaim needs to put a row back whole, in
	// seq order.
	rows []claimedRow
	// aggregates is, in ordered mode, how many aggregates the claim took rows of.
	aggregates int
}

// claimSettings are set in every claim transaction.
//   - JIT off: the claim's cost estimate can be large (it may walk a backlog), and the
//     server's default JIT then spent 30-550 ms compiling every claim.
//   - Sequential scans off (a penalty, not a ban): the claim is index-driven by design, and
//     the generic plan of a prepared claim, made while the table was small, scanned the
//     whole table to find the rows it had picked by ctid; it kept that plan as the
//     published rows piled up (TestOrderedClaimGenericPlanFromASmallTable).
var claimSettings = []string{"SET LOCAL jit = off", "SET LOCAL enable_seqscan = off"}

// claim runs the claim statement and returns what it claimed: in ordered mode, per
// aggregate, the contiguous prefix of locked, available rows (the statement cuts it).
func (r *Relay) claim(ctx context.Context, tx *batchTx, scope []int) (claimedBatch, error) {
	batch := &pgx.Batch{}
	batch.Queue(r.iitTimeout)
	for _, set := range claimSettings {
		batch.Queue(set)
	}
	q := r.claimQuery(scope)
	batch.Queue(r.q.claim, q.args...)
	br := tx.begin(ctx, batch)
	defer func() { _ = br.Close() }()
	for range 2 + len(claimSettings) { // BEGIN, the timeout, the settings
		if _, err := br.Exec(); err != nil {
			return claimedBatch{}, fmt.Errorf("claim: begin: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return claimedBatch{}, fmt.Errorf("claim batch: %w", err)
	}
	read, err := r.readClaimed(rows, q.capacity)
	if err != nil {
		return claimedBatch{}, fmt.Errorf("claim batch: %w", err)
	}
	c := r.assemble(read)
	if r.cfg.Mode == Ordered {
		// Each aggregate in the batch came with its head.
		r.heads.observe(scope, q.heads, c.aggregates, len(read.msgs))
	}
	return c, nil
}

// claimQuery is a claim's arguments for its scope, and what it may return at most.
type claimQuery struct {
	args     []any
	heads    headPlan // ordered mode
	capacity int      // most rows the claim returns
}

// claimQuery returns the arguments of the next claim in scope: BatchSize and
// MaxBatchEvents, halved as often as failed claims asked (narrowClaims).
func (r *Relay) claimQuery(scope []int) claimQuery {
	batchSize, maxEvents := r.narrowed(r.cfg.BatchSize), r.narrowed(r.cfg.MaxBatchEvents)
	if r.cfg.Mode != Ordered {
		return claimQuery{args: []any{batchSize}, capacity: batchSize}
	}
	// at most MaxBatchEvents heads: each gets MaxBatchEvents / heads events
	heads := r.heads.plan(scope, min(batchSize, maxEvents), r.cfg.Partitions)
	return claimQuery{
		args:  []any{scope, heads.limit, r.cfg.MaxPerAggregate, r.cfg.PublishPastDead, maxEvents, r.cfg.Partitions, heads.discover},
		heads: heads, capacity: maxEvents,
	}
}

// readRows is what a claim statement returned, row by row, in its order.
type readRows struct {
	msgs    []outbox.Message
	headers [][]byte     // each message's headers as stored (JSON text)
	rows    []claimedRow // delete-on-publish: what putting each row back needs
}

// readClaimed reads the rows of a claim statement (claim_columns.sql's columns, then the
// attempts before the claim). A value that cannot be read (written out of band: a time
// out of Go's range, say) fails with a *readError.
func (r *Relay) readClaimed(rows pgx.Rows, capacity int) (readRows, error) {
	defer rows.Close()
	var (
		out         readRows
		spare       claimedRow // a row's put-back columns when they are not kept
		traceParent *string
	)
	keepRows := r.cfg.Retention.Mode == DeleteOnPublish
	if keepRows {
		out.rows = make([]claimedRow, 0, capacity)
	}
	// Rows are scanned into their slots, the few distinct types and topics are shared and
	// the id is read as bytes (uuid.UUID is an sql.Scanner, which pgx feeds a string to
	// parse): scanning was a third of a drain's relay CPU, mostly allocations.
	texts := textInterner{}
	aggType, eventType, topic, contentType := texts.column(), texts.column(), texts.column(), texts.column()
	for rows.Next() {
		if out.msgs == nil { // sized once, for a full batch: growing them cost a tenth of a drain's CPU
			out.msgs, out.headers = make([]outbox.Message, 0, capacity), make([][]byte, 0, capacity)
		}
		out.msgs, out.headers = append(out.msgs, outbox.Message{}), append(out.headers, nil)
		m, h := &out.msgs[len(out.msgs)-1], &out.headers[len(out.headers)-1]
		row := &spare
		if keepRows {
			out.rows = append(out.rows, claimedRow{})
			row = &out.rows[len(out.rows)-1]
		}
		aggType.dst, eventType.dst, topic.dst, contentType.dst = &m.AggregateType, &m.EventType, &m.Topic, &m.ContentType
		if err := rows.Scan(
			&m.Seq, (*[16]byte)(&m.ID), aggType, &m.AggregateID, &m.AggregateVersion, eventType,
			&m.SchemaVersion, topic, h, contentType, &m.Payload, &traceParent, &m.CreatedAt,
			&row.availableAt, &row.lastError, &row.payloadJSON, &row.attempts,
		); err != nil {
			return out, &readError{err}
		}
		m.Attempt = row.attempts + 1
		if traceParent != nil {
			m.TraceParent = *traceParent
		}
		if keepRows {
			row.headers, row.traceParent, row.seq = *h, traceParent, m.Seq
		}
	}
	return out, rows.Err()
}

// assemble turns the rows a claim read into a batch: messages in seq order (so each
// aggregate's are in write order), headers decoded. A row whose headers do not decode
// (written out of band) fails alone, dead with the reason; in ordered mode the later
// rows of its aggregate in the batch are skipped (put back untouched).
func (r *Relay) assemble(read readRows) claimedBatch {
	msgs, headers := read.msgs, read.headers
	c := claimedBatch{rows: read.rows}
	if !slices.IsSortedFunc(msgs, func(a, b outbox.Message) int { return cmp.Compare(a.Seq, b.Seq) }) {
		msgs, headers = sortBySeq(msgs, headers)
		slices.SortFunc(c.rows, func(a, b claimedRow) int { return cmp.Compare(a.seq, b.seq) })
	}
	var cut map[aggregateKey]bool // ordered mode: aggregates with an undecodable row in this batch
	aggs := map[aggregateKey]struct{}{}
	n := 0 // msgs[:n] are the messages to publish
	for i, m := range msgs {
		k := keyOf(m)
		if r.cfg.Mode == Ordered {
			aggs[k] = struct{}{}
			if cut[k] {
				c.skipped = append(c.skipped, m)
				continue
			}
		}
		if string(headers[i]) == "{}" {
			// the common case: no headers, nothing to decode
		} else if err := json.Unmarshal(headers[i], &m.Headers); err != nil {
			c.bad = append(c.bad, badRow{m, "undecodable row: headers must be a JSON object of strings: " + err.Error()})
			if r.cfg.Mode == Ordered {
				if cut == nil {
					cut = map[aggregateKey]bool{}
				}
				cut[k] = true
			}
			continue
		}
		msgs[n] = m
		n++
	}
	c.msgs, c.aggregates = msgs[:n], len(aggs)
	return c
}

// sortBySeq returns msgs and their headers sorted by seq.
func sortBySeq(msgs []outbox.Message, headers [][]byte) ([]outbox.Message, [][]byte) {
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(msgs[a].Seq, msgs[b].Seq) })
	sortedMsgs, sortedHeaders := make([]outbox.Message, len(msgs)), make([][]byte, len(msgs))
	for i, o := range order {
		sortedMsgs[i], sortedHeaders[i] = msgs[o], headers[o]
	}
	return sortedMsgs, sortedHeaders
}

// badRow is a claimed row that cannot become a message.
type badRow struct {
	msg    outbox.Message
	reason string
}
