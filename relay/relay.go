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

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/failpoint"
	"github.com/outboxkit/outbox/internal/sqlq"
)

// Relay publishes the events of one outbox schema to one sink. Create it with [New]
// and start it with [Relay.Run].
//
// A relay composes four parts, each with one job: its workers run batches through the
// batcher (claim → publish → classify → settle), the lease keeper keeps its membership
// among the schema's relays and, in ordered mode, its partition leases, the purger
// applies the retention of published events, and the listener turns notifications into
// wake-ups.
type Relay struct {
	pool  *pgxpool.Pool
	cfg   Config
	log   *slog.Logger
	stats counters
	owner string   // this relay in leases and relay_members: random per relay
	wake  *wakeups // idle workers look for work now
	// lastCaughtUp is when (unix ns) the relay's last claim that found events but not a
	// full batch started:
	// the claim cooldown runs from there (Relay.coolDown). 0: none yet.
	lastCaughtUp atomic.Int64
	// caughtUp is, per worker, when (unix ns) its last claim that found events but not a
	// full batch started: whether it keeps up (claimedFull). 0: none yet.
	caughtUp []atomic.Int64
	// busyUntil is until when (unix ns) an ordered relay runs all the workers its plan
	// allows: less than busyHold ago a claim came back full having cut an aggregate or
	// from a worker that had not caught up for catchUpGrace (claimedFull), a batch went on
	// without a slow call, or a probe found a backlog (peerWanted). After that one worker
	// claims for the relay (Relay.activeWorkers, ADR 0035).
	busyUntil atomic.Int64
	workers   workerPlan

	batches  *batcher
	leases   *leaseKeeper
	purger   *purger
	listener *listener // nil with Config.Wakeup WakeupPoll
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
	workers, err := c.workers(int(pool.Config().MaxConns))
	if err != nil {
		return nil, err
	}
	quoted, err := sqlq.QuoteSchema(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("relay config: Schema: %w", err)
	}
	owner := uuid.NewString()
	r := &Relay{
		pool: pool, cfg: c, owner: owner, wake: newWakeups(workers.max, c.Mode == Ordered), workers: workers,
		caughtUp: make([]atomic.Int64, max(1, workers.max)),
		log:      c.Logger.With(slog.String("schema", c.Schema), slog.String("relay_id", owner)),
	}
	q := newQueries(&r.cfg, quoted)
	r.leases = newLeaseKeeper(pool, q, &r.cfg, r.owner, r.log, &r.stats, r.workFound)
	r.batches = newBatcher(pool, sink, &r.cfg, q, r.log, &r.stats, r.leases, r.owner, workers.max, r.claimedFull, r.peerWanted, r.workFound)
	r.leases.breakerUntil = r.batches.breaker.until
	r.purger = &purger{pool: pool, q: q, cfg: &r.cfg, log: r.log, stats: &r.stats}
	if c.Wakeup == WakeupListen {
		r.listener = newListener(pool, c.Schema, r.Wake, r.notified, r.log)
	}
	return r, nil
}

// Wake asks the relay to look for work (and, in ordered mode, for free leases) now
// rather than after its poll interval. It never blocks; wake-ups coalesce.
func (r *Relay) Wake() {
	r.wake.signal()
	signal(r.leases.kick)
}

// workFound wakes an idle worker: newly acquired partitions may hold work.
func (r *Relay) workFound() { r.wake.signal() }

// peerWanted brings an idle worker in to claim the next batch while a batch that found
// work is published, so one wake-up (a notification, Wake) sets every worker to a
// backlog, not just the one it reached. More is waiting than one worker keeps up with
// (a full claim, a slow call, a backlog found): the relay is busy, and every worker its
// plan allows claims for busyHold from now.
func (r *Relay) peerWanted() {
	r.busyUntil.Store(time.Now().Add(busyHold).UnixNano())
	if r.activeWorkers() > 1 {
		r.wake.signal()
	}
}

// claimedFull is called when worker's claim came back full: more was waiting than it may
// take. An aggregate that reached its cut (deep) keeps the worker behind for claims on
// end: the relay is busy at once (peerWanted), so the other worker keeps the other
// aggregates going beside that aggregate's batches, and beside a slow call in one (ADR
// 0033). Otherwise, an ordered worker that caught up (a claim that took less than it may)
// within the last catchUpGrace follows what comes into its share, a flood of many
// aggregates say: its next claim comes at once (a full claim has no cooldown), and a
// second worker would only share the CPU the claims already wait for, each of two claims
// reading the aggregates of the other's share too (ADR 0037).
func (r *Relay) claimedFull(worker int, deep bool) {
	if !deep && r.cfg.Mode == Ordered && r.workers.shared && time.Since(time.Unix(0, r.caughtUp[worker%len(r.caughtUp)].Load())) < catchUpGrace {
		return
	}
	r.peerWanted()
}

// notified routes a notification on the schema's channel: a lease release or a relay
// joining wakes the lease keeper, anything else the workers.
func (r *Relay) notified(payload string) {
	if payload == leaseReleasedPayload {
		signal(r.leases.kick)
		return
	}
	r.wake.signal()
}

// Owner returns the id this relay uses in the leases and relay_members tables.
func (r *Relay) Owner() string { return r.owner }

// Config returns the relay's configuration with every default applied (a copy).
func (r *Relay) Config() Config {
	c := r.cfg
	c.PublishPastDead = slices.Clone(c.PublishPastDead)
	return c
}

// ErrConfigMismatch is returned by Run when relay_config records another mode or
// partition count than this relay's.
var ErrConfigMismatch = errors.New("relay settings differ from relay_config")

// Run publishes until ctx is cancelled, then stops claiming, lets in-flight batches
// finish within Config.ShutdownTimeout (abandoning them after that: their events stay
// pending), and returns nil. It returns an error when it cannot start (settings that
// differ from relay_config) or when its pool is closed under it (no batch could run
// again); a batch that fails otherwise is logged, counted in Stats.Errors and tried
// again. Call Run once per Relay.
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
	if r.cfg.Mode == Ordered || r.workers.shared {
		leaseWG.Go(func() { r.leases.run(leaseCtx) })
	}
	for worker := range r.workers.max {
		wg.Go(func() {
			if err := r.work(fail, hard, worker); err != nil {
				errOnce.Do(func() { firstErr = err; failCancel() })
			}
		})
	}
	if r.cfg.Retention.Mode != DeleteOnPublish {
		wg.Go(func() { r.purger.run(fail) })
	}
	if r.listener != nil {
		wg.Go(func() { r.listener.run(fail) })
	}
	wg.Wait()
	r.batches.late.Wait() // Publish calls that outlived their batch settle before the leases go
	if errors.Is(firstErr, failpoint.ErrCrash) {
		r.leases.abandon() // a simulated crash releases nothing
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
	ctx, cancel := context.WithTimeout(ctx, r.cfg.BatchTimeout)
	defer cancel()
	// Two relays starting on a fresh schema race to insert the row: the loser's INSERT
	// waits, does nothing, and its snapshot cannot see the winner's row yet; asking again
	// (a new statement, a new snapshot) finds it.
	var err error
	for range 3 {
		q := r.batches.q.config
		err = r.pool.QueryRow(ctx, q.SQL, q.Args(&configParams{Mode: string(r.cfg.Mode), Partitions: r.cfg.Partitions})...).Scan(&mode, &partitions)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("relay: read relay_config: %w", sqlq.NotMigrated(r.cfg.Schema, err))
	}
	if Mode(mode) != r.cfg.Mode || partitions != r.cfg.Partitions {
		return fmt.Errorf("relay: %w: this relay has mode=%s partitions=%d, relay_config has mode=%s partitions=%d; mixing them would break order — change relay_config only when every relay is stopped",
			ErrConfigMismatch, r.cfg.Mode, r.cfg.Partitions, mode, partitions)
	}
	return nil
}

// configParams holds relay_config.sql's parameters: this relay's settings.
type configParams struct {
	Mode       string `sql:"mode"`
	Partitions int    `sql:"partitions"`
}
