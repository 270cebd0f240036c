package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// A relay in ordered mode publishes only from the relay partitions it leases. Leases
// live in the leases table: an owner id (random per relay), an epoch bumped on every
// acquisition (the fencing token checked by every mark), and an expiry judged by the
// database's clock. Relays announce themselves in relay_members and each aims at an
// equal share of the partitions, releasing its excess (at once, with a wake-up for the
// others) and taking free or expired leases.

// lease is one relay partition this relay holds.
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
	// releasing: the relay holds more than its share and gives this partition back as
	// soon as no batch includes it; new batches leave it out meanwhile. A relay busy
	// with a backlog would otherwise never find a partition idle to give to a relay
	// that joins.
	releasing bool
}

type leaseSet struct {
	mu    sync.Mutex
	owned map[int]*lease
	// handBack is signalled when a batch ends and leaves a releasing partition idle.
	handBack chan struct{}
}

// claimable returns the partitions a batch may claim now, with their epochs, and marks
// them busy. release must be called when the batch ends.
func (s *leaseSet) claimable(now time.Time) (parts []int, epochs []int64, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, l := range s.owned {
		if now.Before(l.deadline) && !l.releasing {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	for _, p := range parts {
		l := s.owned[p]
		epochs = append(epochs, l.epoch)
		if l.busy == 0 {
			l.busySince = now
		}
		l.busy++
	}
	return parts, epochs, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, p := range parts {
			if l := s.owned[p]; l != nil && l.epoch == epochs[i] {
				l.busy--
				if l.busy == 0 && l.releasing {
					signal(s.handBack)
				}
			}
		}
	}
}

// valid reports whether every partition in parts is still held at its epoch and
// within its local deadline.
func (s *leaseSet) valid(parts []int, epochs []int64, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range parts {
		l := s.owned[p]
		if l == nil || l.epoch != epochs[i] || !now.Before(l.deadline) {
			return false
		}
	}
	return true
}

// leaseLoop keeps this relay's share of leases until ctx is done, then releases them
// and leaves the membership. An unordered relay sharing the default Concurrency runs it
// too, for the membership alone: it heartbeats and counts the live relays.
func (r *Relay) leaseLoop(ctx context.Context) {
	if r.cfg.Mode == Ordered {
		if _, err := r.pool.Exec(ctx, r.q.leaseInit, r.cfg.Partitions); err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "create lease rows", slog.Any("error", err))
		}
	}
	for {
		wait := r.leaseRound(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			r.releaseAll()
			return
		case <-t.C:
		case <-r.leaseWake:
			t.Stop()
		case <-r.leases.handBack:
			t.Stop()
		}
	}
}

// leaseRound heartbeats, renews, releases excess and acquires missing leases, and
// returns how long to wait before the next round.
func (r *Relay) leaseRound(ctx context.Context) time.Duration {
	ttl := r.cfg.LeaseTTL
	interval := ttl / 3
	ctx, cancel := context.WithTimeout(ctx, interval)
	defer cancel()
	fail := func(what string, err error) time.Duration {
		if ctx.Err() == nil {
			r.log.WarnContext(ctx, what, slog.Any("error", err))
		}
		return min(interval, time.Second)
	}
	// Renew what we hold, except partitions whose work is past its budget.
	r.leases.mu.Lock()
	var parts []int
	var epochs []int64
	for p, l := range r.leases.owned {
		if l.busy > 0 && time.Since(l.busySince) > r.cfg.BatchTimeout {
			continue
		}
		parts = append(parts, p)
		epochs = append(epochs, l.epoch)
	}
	r.leases.mu.Unlock()
	sent := time.Now()
	var (
		members     int
		renewedList []int32
		notified    any
	)
	if err := r.pool.QueryRow(ctx, r.q.leaseBeat, r.owner, ttl.Milliseconds(), parts, epochs, r.wakeupChannel).Scan(&members, &renewedList, &notified); err != nil {
		return fail("relay heartbeat", err)
	}
	if r.cfg.Mode == Unordered { // no leases: the heartbeat only shares the workers
		r.workers.Store(int32(sharedWorkers(r.cfg.Concurrency, members)))
		return interval
	}
	target := (r.cfg.Partitions + members - 1) / members
	renewed := map[int]bool{}
	for _, p := range renewedList {
		renewed[int(p)] = true
	}
	deadline := sent.Add(ttl - r.leaseMargin())
	r.leases.mu.Lock()
	for p, l := range r.leases.owned {
		switch {
		case renewed[p]:
			l.deadline = deadline
		case time.Now().Before(l.deadline) && !slices.Contains(parts, p):
			// not renewed on purpose (stuck); it lapses at its deadline
		default:
			delete(r.leases.owned, p)
			r.stats.leasesLost.Add(1)
			r.log.WarnContext(ctx, "lease lost", slog.Int("partition", p), slog.Int64("epoch", l.epoch))
		}
	}
	excess := r.leases.giveBack(target)
	need := target - len(r.leases.owned)
	r.leases.mu.Unlock()
	if len(excess) > 0 {
		if err := r.release(ctx, excess, false); err != nil {
			return fail("release leases", err)
		}
	}
	if need > 0 {
		if err := r.acquire(ctx, need); err != nil {
			return fail("acquire leases", err)
		}
	}
	r.leases.mu.Lock()
	short := len(r.leases.owned) < target
	r.leases.mu.Unlock()
	if !short {
		return interval
	}
	// Still short of our share: come back when the next foreign lease expires.
	var next *int64
	if err := r.pool.QueryRow(ctx, r.q.leaseNextExpiry, r.owner).Scan(&next); err != nil {
		return fail("next lease expiry", err)
	}
	if next != nil {
		return min(interval, time.Duration(*next)*time.Millisecond+20*time.Millisecond)
	}
	return interval
}

// giveBack brings the partitions this relay keeps down (or back up) to target: idle
// ones beyond it are removed and returned, to be released now; busy ones are marked
// releasing — left out of new batches and given back when their batches end, so the
// hand-over happens at a batch boundary and per-aggregate order holds across it. Below
// target (a relay left) it keeps partitions it was giving back. The caller holds s.mu.
func (s *leaseSet) giveBack(target int) (release []int) {
	keep := 0
	for _, l := range s.owned {
		if !l.releasing {
			keep++
		}
	}
	for _, l := range s.owned {
		if keep < target && l.releasing {
			l.releasing = false
			keep++
		}
	}
	for _, idle := range []bool{true, false} { // idle partitions first
		for _, l := range s.owned {
			if keep > target && !l.releasing && (l.busy == 0) == idle {
				l.releasing = true
				keep--
			}
		}
	}
	for p, l := range s.owned {
		if l.releasing && l.busy == 0 {
			release = append(release, p)
			delete(s.owned, p)
		}
	}
	return release
}

// sharedWorkers is how many batches an unordered relay with the default Concurrency
// (def) runs at once while members relays of the schema are alive: def among them all,
// at least one each. On a small server many claims at once lose more to SKIP LOCKED
// walking past each other's rows than they gain (bench/RESULTS.md: 4 relays of 2
// batches each drained at 0.57–0.74 of the SQL limit, 4 relays of 1 at 0.70–0.86; ADR 0006).
func sharedWorkers(def, members int) int { return max(1, def/max(1, members)) }

// leaseMargin is the safety margin between the database's expiry and the local deadline.
func (r *Relay) leaseMargin() time.Duration { return r.cfg.LeaseTTL / 5 }

func (r *Relay) acquire(ctx context.Context, need int) error {
	sent := time.Now()
	rows, err := r.pool.Query(ctx, r.q.leaseAcquire, r.owner, need, r.cfg.LeaseTTL.Milliseconds())
	if err != nil {
		return err
	}
	deadline := sent.Add(r.cfg.LeaseTTL - r.leaseMargin())
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
		r.leases.mu.Lock()
		r.leases.owned[p] = &lease{epoch: epoch, deadline: deadline}
		r.leases.mu.Unlock()
		r.stats.leasesAcquired.Add(1)
		if rescued {
			r.stats.leasesRescued.Add(1)
		}
		got = append(got, p)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(got) > 0 {
		r.log.InfoContext(ctx, "leases acquired", slog.Any("partitions", got))
		signal(r.wake) // work is waiting in the new partitions
	}
	return nil
}

func (r *Relay) release(ctx context.Context, parts []int, leave bool) error {
	var n int
	var notified any
	if err := r.pool.QueryRow(ctx, r.q.leaseRelease, r.owner, parts, leave, r.wakeupChannel).Scan(&n, &notified); err != nil {
		return fmt.Errorf("release leases %v: %w", parts, err)
	}
	r.stats.leasesReleased.Add(int64(n))
	return nil
}

// abandonLeases forgets every lease without releasing it, as a crashed process would.
func (r *Relay) abandonLeases() {
	r.crashed.Store(true)
	r.leases.mu.Lock()
	clear(r.leases.owned)
	r.leases.mu.Unlock()
}

// releaseAll gives back every lease on shutdown and leaves the membership, so the
// other relays take over at once instead of after expiry.
func (r *Relay) releaseAll() {
	if r.crashed.Load() {
		return
	}
	r.leases.mu.Lock()
	parts := make([]int, 0, len(r.leases.owned))
	for p := range r.leases.owned {
		parts = append(parts, p)
	}
	clear(r.leases.owned)
	r.leases.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.release(ctx, parts, true); err != nil {
		r.log.WarnContext(ctx, "release leases on shutdown", slog.Any("error", err))
	}
}
