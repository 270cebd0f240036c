package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/outboxkit/outbox/internal/failpoint"
)

// work runs batches, as worker number worker, until ctx is done. Batches use hard, so
// one in flight when ctx is cancelled can still finish. An idle worker waits for a
// wake-up, or its poll interval, and first asks with one cheap query whether there is
// anything to claim. A claim that does not follow a full one waits out the relay's
// claim cooldown first (coolDown).
func (r *Relay) work(ctx, hard context.Context, worker int) error {
	probe := false     // idle and not woken: ask cheaply before claiming
	woken := false     // the last idle wait ended on a wake-up
	afterFull := false // this worker's last claim took all it may: more may be waiting
	failures := 0      // batches in a row that failed
	claiming := false  // this worker was among the active ones when it last looked
	for ctx.Err() == nil {
		if worker >= r.activeWorkers() { // other relays share the default, or the relay is not busy: wait
			// It went idle before it had to wait: pass the wake-up on. So does a worker
			// that just stopped claiming: its share is another worker's now, which may
			// have looked at its old share since the last wake-up (the relay stopped
			// being busy between the two) and would wait for the next one.
			if woken || claiming {
				r.wake.signal()
			}
			woken, claiming = false, false
			// an ordered worker is woken when a full claim makes the relay busy (its own
			// channel); a shared channel's wake-up is left to the workers that claim
			var busy chan struct{}
			if r.wake.own != nil {
				busy = r.wake.of(worker)
			}
			wait(ctx, r.leases.interval(), busy)
			continue
		}
		woken = false
		if ok, d := r.batches.breaker.acquire(time.Now()); !ok {
			wait(ctx, d, nil)
			continue
		}
		if !afterFull {
			r.coolDown(ctx, worker)
		}
		claiming = true
		n := r.activeWorkers()
		if worker >= n { // the relay stopped being busy during the cooldown
			r.skipTurn()
			continue
		}
		share := r.shareOf(worker, n)
		probed := false // the probe just ran: it saw what the claim would
		if probe {
			ready, backlog, err := r.batches.ready(hard, share, r.mayGetBusy(n))
			probed = err == nil
			if err == nil && !ready {
				r.batches.breaker.inconclusive()
				woken = wait(ctx, r.idleWait(), r.wake.of(worker))
				probe = r.probeAfter(worker, woken, true)
				continue
			}
			if backlog && r.becameBusy() {
				// the relay was not busy: every worker claims this backlog, each from its
				// share (a claim over all the partitions would hold them from the others
				// until it ends, ADR 0035)
				probe = false
				r.skipTurn()
				continue
			}
		}
		claimStart := time.Now()
		res, err := r.batches.run(hard, share, nil)
		afterFull = err == nil && res.full
		if err == nil && res.claimed > 0 && !res.full && !res.down { // caught up: a trickle's claim
			r.lastCaughtUp.Store(claimStart.UnixNano())
			r.caughtUp[worker].Store(claimStart.UnixNano())
		}
		if res.claimed > 0 && r.dealMoved(worker, res.parts) {
			// The deal changed while this batch held its rows: a sibling now dealt some
			// of its partitions claimed past the locked rows, found nothing, and waits;
			// they are free now.
			r.wake.signal()
		}
		if err == nil {
			failures = 0
		}
		switch {
		case errors.Is(err, failpoint.ErrCrash):
			return err
		case errors.Is(err, puddle.ErrClosedPool):
			// No batch can ever run again: Run ends instead of retrying forever.
			return fmt.Errorf("relay: the pool was closed while the relay ran: %w", err)
		case err != nil:
			r.batches.breaker.inconclusive()
			if hard.Err() != nil {
				return nil // shut down mid-batch: abandoned, events stay pending
			}
			r.stats.errors.Add(1)
			r.log.WarnContext(ctx, "batch failed", slog.Any("error", err))
			failures++
			wait(ctx, r.afterFailedBatch(failures), nil)
			probe = false
		case res.claimed == 0:
			r.batches.breaker.inconclusive()
			if !probed {
				// An empty claim returns no row, so nothing of what it saw: the probe
				// tells idleWait when a row not yet available (scheduled later, say)
				// comes due. Its ready answer is not acted on: rows another batch holds
				// locked look ready, and the wait for a wake-up is what stops a spin.
				_, _, _ = r.batches.ready(hard, share, false)
			}
			woken = wait(ctx, r.idleWait(), r.wake.of(worker))
			probe = r.probeAfter(worker, woken, true)
		case res.down:
			// Its rows went back untouched: claim them again when the breaker lets a
			// batch through (acquire), not at a wake-up that may never come.
			probe = false
		case !res.full:
			// The claim took what there was: claim again when told of more (a wake-up
			// that came during the batch ends the wait at once) or at the next poll, not
			// straight away — an empty claim is a transaction too, and it would start
			// the claim cooldown again.
			woken = wait(ctx, r.idleWait(), r.wake.of(worker))
			probe = r.probeAfter(worker, woken, false)
		default:
			probe = false
		}
	}
	return nil
}

// afterFailedBatch is how long a worker waits after the failures-th batch in a row that
// failed (a connection cut, a timeout, a server-side error): from 50 ms, doubling, to at
// most a second and the worker's idle wait. The failed batch's rows are still pending and
// nothing may wake the worker for them, so it must not wait for a poll that may be an
// hour away; a lasting failure is not retried more often than once a second.
func (r *Relay) afterFailedBatch(failures int) time.Duration {
	d := 50 * time.Millisecond << min(failures-1, 5)
	return min(d, time.Second, r.idleWait())
}

// coolDown waits until Config.ClaimCooldown has passed since the start of the relay's
// last claim that found events but not a full batch (the relay had caught up). Wake-ups
// that come in the meantime coalesce into the claim that follows, so under a trickle each
// worker claims at most once per cooldown, however often the relay is woken (ADR 0029).
// ctx ending cuts the wait short. With lanes (Config.IsolatedTypes) the cooldown is the
// lane's: a flood's claims, each stopped by its type's rate (ADR 0040), kept the other
// types' worker waiting out their cooldowns, half of one on average for every event.
func (r *Relay) coolDown(ctx context.Context, worker int) {
	last := r.lastCaughtUp.Load()
	if n := r.activeWorkers(); r.shareOf(worker, n).lane != laneAll {
		last = r.laneCaughtUp(worker, n)
	}
	if r.cfg.ClaimCooldown <= 0 || last == 0 {
		return
	}
	// at most one cooldown, should the wall clock step back
	if d := min(time.Until(time.Unix(0, last).Add(r.cfg.ClaimCooldown)), r.cfg.ClaimCooldown); d > 0 {
		wait(ctx, d, nil)
	}
}

// laneCaughtUp returns when (unix ns) a worker of worker's lane, of n active workers,
// last caught up (0: never).
func (r *Relay) laneCaughtUp(worker, n int) int64 {
	var last int64
	ln := r.shareOf(worker, n).lane
	for i := range min(n, len(r.caughtUp)) {
		if r.shareOf(i, n).lane == ln {
			last = max(last, r.caughtUp[i].Load())
		}
	}
	return last
}

// dealMoved reports whether, in ordered mode, worker's share of the relay's partitions
// is no longer parts, the share a batch of its claimed from: the count of active workers
// or the leases moved under the batch (ADR 0024 deals them out by position), or the worker
// is no longer active. An ordered claim passes over aggregates whose rows another batch
// holds locked, so a sibling dealt those partitions meanwhile found nothing there and went
// idle; without a wake-up it waited for its poll (a minute in the drain benchmark's cold
// start, which drained at 0.02–0.23 of the limit in some runs).
func (r *Relay) dealMoved(worker int, parts []int) bool {
	if r.cfg.Mode != Ordered || parts == nil {
		return false
	}
	active := r.activeWorkers()
	if worker >= active {
		return true
	}
	return !slices.Equal(r.leases.dealt(time.Now(), r.shareOf(worker, active)), parts)
}

// probeAfter reports whether a worker whose idle wait ended (woken: by a wake-up) asks
// with the cheap probe before it claims; foundNone: its last look (a claim or a probe)
// found nothing to claim. A shared wake-up reaches one worker, which claims at once. An
// ordered wake-up reaches every worker (wakeups), and most of them have nothing new in
// their share: they probe first, a read, so that a trickle of events does not cost a
// write transaction per worker per event (1.91 claims per event at 500 events/s, against
// 0.93 with one worker woken).
//
// One worker claiming for the whole relay (not busy, ADR 0035) that caught up within the
// last busyHold is following a trickle: the wake-up is for events it will claim, and it
// claims at once, one statement where the probe made two. Unless its last look found
// nothing: a relay that shares the schema's partitions with others is woken for their
// events too, and claimed after each of their wake-ups: three empty claims an event with
// four relays (their backends and process kept 14–18 % of a two-core machine busy for a
// trickle of 50 events/s, against 5 % for one relay). After a look that found nothing it
// asks first, until a look finds events.
//
// So does the worker of the other types' lane (Config.IsolatedTypes, ADR 0039): it alone
// claims those types, so a wake-up after it caught up is for events it will claim (ADR
// 0040).
func (r *Relay) probeAfter(worker int, woken, foundNone bool) bool {
	if !woken {
		return true
	}
	if r.wake.own == nil {
		return false
	}
	if foundNone {
		return true
	}
	n := r.activeWorkers()
	if n == 1 {
		return time.Since(time.Unix(0, r.lastCaughtUp.Load())) >= busyHold
	}
	return r.shareOf(worker, n).lane != laneOthers || time.Since(time.Unix(0, r.caughtUp[worker].Load())) >= busyHold
}

// busyHold is how long an ordered relay keeps all its workers claiming after it was last
// found busy (peerWanted; ADR 0035).
const busyHold = time.Second

// catchUpGrace is how long after an ordered worker last caught up its full claim does not
// make the relay busy (Relay.claimedFull, ADR 0037).
const catchUpGrace = 100 * time.Millisecond

// skipTurn is for a worker that passed the breaker (acquire) and runs no batch after all:
// with the breaker open, it held the breaker's one probe, which no batch would then end
// (the breaker waited for it forever, and the sink's outage never ended for the relay).
func (r *Relay) skipTurn() {
	if r.batches.breaker.open() {
		r.batches.breaker.inconclusive()
	}
}

// mayGetBusy reports whether active workers, of more allowed, would be more if the
// relay were busy: whether a probe should ask if it found a backlog.
func (r *Relay) mayGetBusy(active int) bool { return active < r.allowedWorkers() }

// becameBusy marks the relay busy and wakes the other workers (peerWanted), and reports
// true, when that changes the active workers, so the workers' shares: a worker then
// claims from its new one. Busy already, it does nothing: a backlog the claims cannot
// take (rows after a dead event, say) must not wake the workers after every probe.
func (r *Relay) becameBusy() bool {
	if !r.mayGetBusy(r.activeWorkers()) {
		return false
	}
	r.peerWanted()
	return true
}

// allowedWorkers is how many batches the relay may run at once now: its plan's workers,
// or its share of the default among the schema's live relays.
func (r *Relay) allowedWorkers() int { return r.workers.active(int(r.leases.members.Load())) }

// activeWorkers is how many of the relay's workers run batches now: the allowed ones, but
// in ordered mode with the default Concurrency only one unless the relay is busy (in the
// last busyHold a claim came back full having cut an aggregate or from a worker that had
// not caught up for catchUpGrace, a batch went on without a slow call, or a probe found a
// backlog). An
// ordered wake-up reaches every worker, and a trickle's events are in every worker's
// share: each worker claimed a few of them, a write transaction each, where one claim over
// all the relay's partitions takes them all (ADR 0035). Unordered workers share one
// wake-up, which reaches one of them; a Concurrency set is kept as set.
func (r *Relay) activeWorkers() int {
	n := r.allowedWorkers()
	if n > 1 && r.workers.shared && r.cfg.Mode == Ordered && time.Now().UnixNano() >= r.busyUntil.Load() {
		return 1
	}
	return n
}

// idleWait is how long an idle relay waits for a wake-up before looking again.
func (r *Relay) idleWait() time.Duration {
	idle := r.cfg.PollInterval
	if r.listener.isListening() {
		idle = r.cfg.FallbackPollInterval
	}
	// Retries this relay scheduled, and rows its claims saw scheduled later, come due
	// without any notification.
	if due := r.batches.nextDue.Load(); due != 0 {
		idle = min(idle, max(time.Until(time.Unix(0, due)), time.Millisecond))
	}
	return idle
}

// workerShare says which of a relay's active workers runs a batch: worker index of of,
// in lane.
type workerShare struct {
	index, of int
	lane      lane
}

// lane is which aggregate types a worker claims (Config.IsolatedTypes, ADR 0039).
type lane int8

const (
	laneAll      lane = iota // every type: no lanes
	laneIsolated             // Config.IsolatedTypes only
	laneOthers               // every type but those
	lanes                    // how many lanes there are
)

// overlaps reports whether the claims of lanes l and o may take the same aggregates.
func (l lane) overlaps(o lane) bool { return l == laneAll || o == laneAll || l == o }

// shareOf returns the share of worker index of of active workers, in its lane: with
// IsolatedTypes, the last worker claims the other types and the ones before it the
// isolated types.
func (r *Relay) shareOf(index, of int) workerShare {
	s := workerShare{index: index, of: of, lane: laneIsolated}
	switch {
	case len(r.cfg.IsolatedTypes) == 0 || of < 2:
		s.lane = laneAll
	case index == of-1:
		s.lane = laneOthers
	}
	return s
}

// deal returns the share's turn of parts: every of-th one from index; in a lane, every
// partition to the other types' worker, and the isolated types' workers deal them among
// themselves.
func (s workerShare) deal(parts []int) []int {
	of := s.of
	switch s.lane {
	case laneOthers:
		return parts
	case laneIsolated:
		of--
	}
	if of <= 1 {
		return parts
	}
	var mine []int
	for i := s.index; i < len(parts); i += of {
		mine = append(mine, parts[i])
	}
	return mine
}
