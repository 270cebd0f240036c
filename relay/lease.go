package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

// A relay in ordered mode publishes only from the relay partitions it leases. Leases
// live in the leases table: an owner id (random per relay), an epoch bumped on every
// acquisition (the fencing token checked before every commit), and an expiry judged by
// the database's clock. Relays announce themselves in relay_members and each aims at an
// equal share of the partitions, releasing its excess (at a batch boundary, with a
// wake-up for the others) and taking free or expired leases (ADR 0005).

// lease is one relay partition a relay holds.
type lease struct {
	epoch int64
	// deadline: local monotonic time after which the lease may have expired in the
	// database (renewal sent + TTL - margin). Past it, the relay stops publishing for
	// the partition on its own.
	deadline time.Time
	// busy counts batches in flight that include the partition; busySince is when the
	// oldest began. A partition busy longer than the batch budget is not renewed: a
	// publish hung on a dead connection must not keep a partition forever.
	busy      int
	busySince time.Time
	// claiming counts, by lane, this relay's batches whose transaction includes the
	// partition and has not ended: their claims locked its rows, and their commits will
	// change them. A claim whose lane overlaps theirs leaves the partition out (lanes of
	// different types never pick the same aggregates, ADR 0039). passedOver: a claim
	// left the partition out meanwhile; the workers are woken when the last of those
	// transactions ends.
	claiming   [lanes]int
	passedOver bool
	// releasing: the relay holds more than its share and gives this partition back as
	// soon as no batch includes it; new batches leave it out meanwhile. A relay busy
	// with a backlog would otherwise never find a partition idle to give to a relay
	// that joins.
	releasing bool
}

// heldFrom reports whether a batch of a lane that overlaps ln holds the partition in its
// transaction.
func (l *lease) heldFrom(ln lane) bool {
	for o, n := range l.claiming {
		if n > 0 && ln.overlaps(lane(o)) {
			return true
		}
	}
	return false
}

// leaseKeeper keeps a relay's membership among the relays of its schema (a heartbeat in
// relay_members) and, in ordered mode, its share of the partition leases. An unordered
// relay that shares the default Concurrency runs it for the membership alone: it counts
// the live relays.
type leaseKeeper struct {
	pool    *pgxpool.Pool
	q       *queries
	cfg     *Config
	owner   string // this relay in leases and relay_members
	channel string // the schema's wake-up channel
	log     *slog.Logger
	stats   *counters
	// workAvailable is called when newly acquired partitions may hold work.
	workAvailable func()
	// breakerUntil reports until when the sink's breaker is open (zero: closed), for the
	// heartbeat; set once the batcher exists.
	breakerUntil func() time.Time

	kick    chan struct{} // runs the next round now: a release or a join notified, or a batch left a releasing partition idle
	members atomic.Int32  // live relays of the schema at the last heartbeat (this one included)
	crashed atomic.Bool   // a simulated crash (failpoint): leases are abandoned, not released

	mu    sync.Mutex
	owned map[int]*lease
}

func newLeaseKeeper(pool *pgxpool.Pool, q *queries, cfg *Config, owner string, log *slog.Logger, stats *counters, workAvailable func()) *leaseKeeper {
	k := &leaseKeeper{
		pool: pool, q: q, cfg: cfg, owner: owner, channel: outbox.WakeupChannel(cfg.Schema), log: log, stats: stats,
		workAvailable: workAvailable, kick: make(chan struct{}, 1), owned: map[int]*lease{},
	}
	k.members.Store(1)
	return k
}

// claimedParts is what claimable hands one batch.
type claimedParts struct {
	parts  []int   // the partitions the batch claims from, in order
	epochs []int64 // their lease epochs
	// dealt is the worker's whole share: parts, and those a sibling's batch still held
	dealt []int
	// ended must be called when the batch's transaction ends (its rows are no longer
	// locked: a sibling may claim them), done when the batch ends, its late settle
	// included (no longer busy; it calls ended if need be)
	ended, done func()
}

// claimable returns the partitions a batch of worker share may claim now, with their
// epochs, and marks them busy. The claimable partitions are dealt out among the active
// workers in turn (by position, so every worker has some while there are as many as
// workers): two ordered batches of one relay never read the same aggregates. Reading the
// same ones, the later claim found the heads the earlier one had taken and committed
// since its snapshot, and re-checked each locked row against the whole claim
// (EvalPlanQual): 10,000 rows passed over in 5.6 s, for an empty claim. The deal moves
// when workers become active or idle or leases come and go; a partition of share that a
// sibling's batch, dealt it before, still holds in its transaction is left out until that
// transaction ends, and that end wakes the workers (ADR 0032). Without that, a claim of 4
// partitions just dealt took 2–3 s of CPU in 14 of 64 cold starts of 4 relays on 50,000
// events, against 0.1–0.4 s.
func (k *leaseKeeper) claimable(now time.Time, share workerShare) claimedParts {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := claimedParts{dealt: k.dealtLocked(now, share)}
	for _, p := range c.dealt {
		l := k.owned[p]
		if l.heldFrom(share.lane) {
			l.passedOver = true
			continue
		}
		c.parts, c.epochs = append(c.parts, p), append(c.epochs, l.epoch)
		if l.busy == 0 {
			l.busySince = now
		}
		l.busy++
		l.claiming[share.lane]++
	}
	parts, epochs := c.parts, c.epochs
	// each of its own partitions still held at its epoch, with k.mu held
	each := func(f func(*lease)) {
		for i, p := range parts {
			if l := k.owned[p]; l != nil && l.epoch == epochs[i] {
				f(l)
			}
		}
	}
	// ended ends the batch's hold, once, and wakes the workers if a claim passed over one
	// of its partitions meanwhile: that claim's worker, or a by-seq batch's rows, wait for
	// a wake-up (a by-seq batch sends none of its own)
	ended := false
	c.ended = func() {
		k.mu.Lock()
		wake := false
		if !ended {
			ended = true
			each(func(l *lease) {
				l.claiming[share.lane]--
				if l.claiming[share.lane] == 0 && l.passedOver {
					l.passedOver, wake = false, true
				}
			})
		}
		k.mu.Unlock()
		if wake {
			k.workAvailable()
		}
	}
	c.done = func() {
		c.ended()
		k.mu.Lock()
		defer k.mu.Unlock()
		each(func(l *lease) {
			l.busy--
			if l.busy == 0 && l.releasing {
				signal(k.kick) // give it back now
			}
		})
	}
	return c
}

// dealt returns the partitions share would claim from now, as claimable does, without
// marking them busy.
func (k *leaseKeeper) dealt(now time.Time, share workerShare) []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dealtLocked(now, share)
}

// dealtLocked is dealt for a caller that holds k.mu: share's turn of the partitions held
// within their local deadline and not being given back, in order.
func (k *leaseKeeper) dealtLocked(now time.Time, share workerShare) []int {
	var parts []int
	for p, l := range k.owned {
		if now.Before(l.deadline) && !l.releasing {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	return share.deal(parts)
}

// valid reports whether every partition in parts is still held at its epoch and
// within its local deadline.
func (k *leaseKeeper) valid(parts []int, epochs []int64, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, p := range parts {
		l := k.owned[p]
		if l == nil || l.epoch != epochs[i] || !now.Before(l.deadline) {
			return false
		}
	}
	return true
}

// run keeps the membership (and leases) until ctx is done, then releases the leases
// and leaves the membership.
func (k *leaseKeeper) run(ctx context.Context) {
	if k.cfg.Mode == Ordered {
		initCtx, cancel := context.WithTimeout(ctx, k.interval())
		if _, err := k.pool.Exec(initCtx, k.q.leaseInit.SQL, k.q.leaseInit.Args(&leaseInitParams{Partitions: k.cfg.Partitions})...); err != nil && ctx.Err() == nil {
			k.log.WarnContext(ctx, "create lease rows", slog.Any("error", err))
		}
		cancel()
	}
	for {
		if wait(ctx, k.round(ctx), k.kick) && ctx.Err() != nil {
			k.releaseAll()
			return
		}
	}
}

// interval is the time between heartbeats: a third of the lease's TTL.
func (k *leaseKeeper) interval() time.Duration { return k.cfg.LeaseTTL / 3 }

// margin is the safety margin between the database's expiry and the local deadline.
func (k *leaseKeeper) margin() time.Duration { return k.cfg.LeaseTTL / 5 }

// round heartbeats, renews, releases excess and acquires missing leases, and returns
// how long to wait before the next round. Each round is bounded by the interval.
func (k *leaseKeeper) round(ctx context.Context) time.Duration {
	ttl, interval := k.cfg.LeaseTTL, k.interval()
	stopping := ctx.Err
	ctx, cancel := context.WithTimeout(ctx, interval)
	defer cancel()
	fail := func(what string, err error) time.Duration {
		// a round that ran out of its own time is logged: a database too slow or too
		// locked for the heartbeat leaves the relay without leases, and silence hid it
		if stopping() == nil {
			k.log.WarnContext(ctx, what, slog.Any("error", err))
		}
		return min(interval, time.Second)
	}
	parts, epochs := k.renewable()
	sent := time.Now()
	var (
		members     int
		renewedList []int32
		notified    any
	)
	// the breaker's state as the database's time: open (not closed: waiting or probing)
	// for the milliseconds left of its wait, 0 once the wait is over; null when closed
	var openForMS *int64
	if k.breakerUntil != nil {
		if t := k.breakerUntil(); !t.IsZero() {
			ms := max(0, time.Until(t).Milliseconds())
			openForMS = &ms
		}
	}
	beat := beatParams{
		Owner: k.owner, TTLMS: ttl.Milliseconds(), Partitions: parts, Epochs: epochs, Channel: k.channel,
		BreakerOpenMS: openForMS, Published: k.stats.published.Load(), Dead: k.stats.dead.Load(), BreakerOpens: k.stats.breakerOpens.Load(),
	}
	if err := k.pool.QueryRow(ctx, k.q.leaseBeat.SQL, k.q.leaseBeat.Args(&beat)...).Scan(&members, &renewedList, &notified); err != nil {
		return fail("relay heartbeat", err)
	}
	if old := k.members.Swap(int32(members)); old != int32(members) {
		// the relays' share of the default Concurrency moved, and so did the deal of
		// partitions among the active workers: a worker that went idle on its old share
		// may have work in its new one
		k.workAvailable()
	}
	if k.cfg.Mode == Unordered { // no leases: the heartbeat only counts the relays
		return interval
	}
	target := (k.cfg.Partitions + members - 1) / members
	excess, need, revived := k.settle(renewedList, parts, sent.Add(ttl-k.margin()), target)
	if revived {
		// partitions claims left out (a lapsed local deadline, a hand-over called off)
		// are claimable again: idle workers that probed meanwhile found nothing there
		k.workAvailable()
	}
	if len(excess) > 0 {
		if err := k.release(ctx, excess, false); err != nil {
			return fail("release leases", err)
		}
	}
	if need > 0 {
		if err := k.acquire(ctx, need); err != nil {
			return fail("acquire leases", err)
		}
	}
	if k.held() >= target {
		return interval
	}
	// Still short of our share: come back when the next foreign lease expires.
	var next *int64
	if err := k.pool.QueryRow(ctx, k.q.leaseNextExpiry.SQL, k.q.leaseNextExpiry.Args(&ownerParams{Owner: k.owner})...).Scan(&next); err != nil {
		return fail("next lease expiry", err)
	}
	if next != nil {
		return min(interval, time.Duration(*next)*time.Millisecond+20*time.Millisecond)
	}
	return interval
}

// renewable returns the partitions to renew: every one held, except those whose work
// is past its budget.
func (k *leaseKeeper) renewable() (parts []int, epochs []int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for p, l := range k.owned {
		if l.busy > 0 && time.Since(l.busySince) > k.cfg.BatchTimeout {
			continue
		}
		parts = append(parts, p)
		epochs = append(epochs, l.epoch)
	}
	return parts, epochs
}

// settle takes in a heartbeat's answer: renewed partitions get deadline, partitions
// not renewed are lost (unless left unrenewed on purpose: they lapse at their deadline),
// and the set is brought to target (giveBack). It returns the partitions to release now,
// how many to acquire, and whether partitions left out of claims (past their local
// deadline, or being given back) are claimable again.
func (k *leaseKeeper) settle(renewedList []int32, sent []int, deadline time.Time, target int) (release []int, need int, revived bool) {
	renewed := make(map[int]bool, len(renewedList))
	for _, p := range renewedList {
		renewed[int(p)] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	for p, l := range k.owned {
		switch {
		case renewed[p]:
			// a lease renewed after its local deadline passed was left out of claims
			// meanwhile: claimable again, its work needs a wake-up
			revived = revived || !now.Before(l.deadline)
			l.deadline = deadline
		case now.Before(l.deadline) && !slices.Contains(sent, p):
			// not renewed on purpose (stuck); it lapses at its deadline
		default:
			delete(k.owned, p)
			k.stats.leasesLost.Add(1)
			k.log.Warn("lease lost", slog.Int("partition", p), slog.Int64("epoch", l.epoch))
		}
	}
	release, kept := k.giveBack(target)
	return release, target - len(k.owned), revived || kept
}

// held returns how many partitions the relay holds.
func (k *leaseKeeper) held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.owned)
}

// giveBack brings the partitions this relay keeps down (or back up) to target: idle
// ones beyond it are removed and returned, to be released now; busy ones are marked
// releasing — left out of new batches and given back when their batches end, so the
// hand-over happens at a batch boundary and per-aggregate order holds across it. Below
// target (a relay left) it keeps partitions it was giving back, and reports kept. The
// caller holds k.mu.
func (k *leaseKeeper) giveBack(target int) (release []int, kept bool) {
	keep := 0
	for _, l := range k.owned {
		if !l.releasing {
			keep++
		}
	}
	for _, l := range k.owned {
		if keep < target && l.releasing {
			l.releasing, kept = false, true // left out of claims while releasing: wake them
			keep++
		}
	}
	for _, idle := range []bool{true, false} { // idle partitions first
		for _, l := range k.owned {
			if keep > target && !l.releasing && (l.busy == 0) == idle {
				l.releasing = true
				keep--
			}
		}
	}
	for p, l := range k.owned {
		if l.releasing && l.busy == 0 {
			release = append(release, p)
			delete(k.owned, p)
		}
	}
	return release, kept
}

func (k *leaseKeeper) acquire(ctx context.Context, need int) error {
	sent := time.Now()
	rows, err := k.pool.Query(ctx, k.q.leaseAcquire.SQL, k.q.leaseAcquire.Args(&acquireParams{Owner: k.owner, Need: need, TTLMS: k.cfg.LeaseTTL.Milliseconds()})...)
	if err != nil {
		return err
	}
	deadline := sent.Add(k.cfg.LeaseTTL - k.margin())
	var got []int
	for rows.Next() {
		var (
			p       int
			epoch   int64
			rescued bool
		)
		if err := rows.Scan(&p, &epoch, &rescued); err != nil {
			rows.Close()
			return err
		}
		k.mu.Lock()
		k.owned[p] = &lease{epoch: epoch, deadline: deadline}
		k.mu.Unlock()
		k.stats.leasesAcquired.Add(1)
		if rescued {
			k.stats.leasesRescued.Add(1)
		}
		got = append(got, p)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(got) > 0 {
		k.log.InfoContext(ctx, "leases acquired", slog.Any("partitions", got))
		k.workAvailable() // work is waiting in the new partitions
	}
	return nil
}

func (k *leaseKeeper) release(ctx context.Context, parts []int, leave bool) error {
	var n int
	var notified any
	rel := releaseParams{Owner: k.owner, Partitions: parts, Leave: leave, Channel: k.channel}
	if err := k.pool.QueryRow(ctx, k.q.leaseRelease.SQL, k.q.leaseRelease.Args(&rel)...).Scan(&n, &notified); err != nil {
		return fmt.Errorf("release leases %v: %w", parts, err)
	}
	k.stats.leasesReleased.Add(int64(n))
	return nil
}

// abandon forgets every lease without releasing it, as a crashed process would.
func (k *leaseKeeper) abandon() {
	k.crashed.Store(true)
	k.mu.Lock()
	clear(k.owned)
	k.mu.Unlock()
}

// releaseAll gives back every lease on shutdown and leaves the membership, so the
// other relays take over at once instead of after expiry.
func (k *leaseKeeper) releaseAll() {
	if k.crashed.Load() {
		return
	}
	k.mu.Lock()
	parts := make([]int, 0, len(k.owned))
	for p := range k.owned {
		parts = append(parts, p)
	}
	clear(k.owned)
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.release(ctx, parts, true); err != nil {
		k.log.WarnContext(ctx, "release leases on shutdown", slog.Any("error", err))
	}
}

// The parameters of the lease statements (lease_*.sql, fence.sql), bound by name.
type (
	// leaseInitParams: lease_init.sql's.
	leaseInitParams struct {
		Partitions int `sql:"partitions"`
	}
	// beatParams: lease_beat.sql's.
	beatParams struct {
		Owner         string  `sql:"owner"`
		TTLMS         int64   `sql:"ttl_ms"`
		Partitions    []int   `sql:"partitions"`
		Epochs        []int64 `sql:"epochs"`
		Channel       string  `sql:"channel"`
		BreakerOpenMS *int64  `sql:"breaker_open_ms"`
		Published     int64   `sql:"published"`
		Dead          int64   `sql:"dead"`
		BreakerOpens  int64   `sql:"breaker_opens"`
	}
	// acquireParams: lease_acquire.sql's.
	acquireParams struct {
		Owner string `sql:"owner"`
		Need  int    `sql:"need"`
		TTLMS int64  `sql:"ttl_ms"`
	}
	// releaseParams: lease_release.sql's.
	releaseParams struct {
		Owner      string `sql:"owner"`
		Partitions []int  `sql:"partitions"`
		Leave      bool   `sql:"leave"`
		Channel    string `sql:"channel"`
	}
	// ownerParams: lease_next_expiry.sql's.
	ownerParams struct {
		Owner string `sql:"owner"`
	}
	// fenceParams: fence.sql's: a batch's leases, checked at its commit.
	fenceParams struct {
		Owner      string  `sql:"owner"`
		Partitions []int   `sql:"partitions"`
		Epochs     []int64 `sql:"epochs"`
	}
)
