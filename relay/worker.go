package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/outboxkit/outbox/internal/failpoint"
)

// work runs batches, as worker number worker, until ctx is done. Batches use hard, so
// one in flight when ctx is cancelled can still finish. An idle worker waits for a
// wake-up, or its poll interval, and first asks with one cheap query whether there is
// anything to claim.
func (r *Relay) work(ctx, hard context.Context, worker int) error {
	probe := false // idle and not woken: ask cheaply before claiming
	woken := false // the last idle wait ended on a wake-up
	for ctx.Err() == nil {
		if worker >= r.activeWorkers() { // other relays share the default: wait
			if woken { // it went idle before it had to wait: pass the wake-up on
				r.wake.signal()
			}
			woken = false
			wait(ctx, r.leases.interval(), nil)
			continue
		}
		woken = false
		if ok, d := r.batches.breaker.acquire(time.Now()); !ok {
			wait(ctx, d, nil)
			continue
		}
		share := workerShare{index: worker, of: r.activeWorkers()}
		if probe {
			ready, err := r.batches.ready(hard, share)
			if err == nil && !ready {
				r.batches.breaker.inconclusive()
				woken = wait(ctx, r.idleWait(), r.wake.of(worker))
				probe = r.probeAfter(woken)
				continue
			}
		}
		res, err := r.batches.run(hard, share, nil)
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
			wait(ctx, r.cfg.PollInterval, nil)
			probe = false
		case res.claimed == 0:
			r.batches.breaker.inconclusive()
			woken = wait(ctx, r.idleWait(), r.wake.of(worker))
			probe = r.probeAfter(woken)
		case !res.full && r.listener.isListening():
			// The claim took what there was: claim again when told of more (a wake-up
			// that came during the batch ends the wait at once), not straight away — an
			// empty claim is a write transaction too.
			woken = wait(ctx, r.idleWait(), r.wake.of(worker))
			probe = r.probeAfter(woken)
		default:
			probe = false
		}
	}
	return nil
}

// probeAfter reports whether a worker whose idle wait ended (woken: by a wake-up) asks
// with the cheap probe before it claims. A shared wake-up reaches one worker, which claims
// at once. An ordered wake-up reaches every worker (wakeups), and most of them have
// nothing new in their share: they probe first, a read, so that a trickle of events does
// not cost a write transaction per worker per event (1.91 claims per event at 500
// events/s, against 0.93 with one worker woken).
func (r *Relay) probeAfter(woken bool) bool { return !woken || r.wake.own != nil }

// activeWorkers is how many of the relay's workers run batches now.
func (r *Relay) activeWorkers() int { return r.workers.active(int(r.leases.members.Load())) }

// idleWait is how long an idle relay waits for a wake-up before looking again.
func (r *Relay) idleWait() time.Duration {
	idle := r.cfg.PollInterval
	if r.listener.isListening() {
		idle = r.cfg.FallbackPollInterval
	}
	// Retries this relay scheduled come due without any notification.
	if due := r.batches.nextRetry.Load(); due != 0 {
		idle = min(idle, max(time.Until(time.Unix(0, due)), time.Millisecond))
	}
	return idle
}

// workerShare says which of a relay's active workers runs a batch: worker index of of.
type workerShare struct{ index, of int }

// deal returns the share's turn of parts: every of-th one from index.
func (s workerShare) deal(parts []int) []int {
	if s.of <= 1 {
		return parts
	}
	var mine []int
	for i := s.index; i < len(parts); i += s.of {
		mine = append(mine, parts[i])
	}
	return mine
}
