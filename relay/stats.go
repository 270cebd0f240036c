package relay

import (
	"sync/atomic"
	"time"
)

// Stats counts what a relay has done since it was created.
type Stats struct {
	// Published events (first or repeated deliveries acknowledged by the sink).
	Published int64
	// Retried events: a failed attempt with another to come.
	Retried int64
	// Dead events: permanent failures and spent budgets.
	Dead int64
	// Batches that claimed at least one event.
	Batches int64
	// Claims counts claim transactions, also those that found nothing: each is a write
	// transaction on the database.
	Claims int64
	// BreakerOpens counts transitions of the breaker from closed to open.
	BreakerOpens int64
	// SinkDownBatches counts batches abandoned because the sink was down.
	SinkDownBatches int64
	// Errors counts batches that failed and were not the sink being down: a database
	// error, or a sink that broke the contract (not one result per message).
	Errors int64
	// Purged counts events removed by retention (archived ones included).
	Purged int64
	// LeasesAcquired counts relay partitions this relay took (ordered mode).
	LeasesAcquired int64
	// LeasesRescued counts leases taken over after they expired (their owner crashed
	// or paused) rather than being released; the pending events of those partitions
	// were rescued.
	LeasesRescued int64
	// LeasesLost counts leases this relay lost to another (it found the epoch moved on).
	LeasesLost int64
	// LeasesReleased counts leases this relay gave back (rebalance or shutdown).
	LeasesReleased int64
	// FencedWrites counts the events of batches rolled back at commit because a lease
	// they were claimed under had been taken over (this relay paused past it): the new
	// owner publishes them again (counted duplicates).
	FencedWrites int64
	// SettleRetries counts put-backs of unpublished rows retried after a serialization
	// failure or deadlock.
	SettleRetries int64
	// LatePublishes counts events whose Publish call outlived its batch (SlowPublish):
	// held in flight while the relay went on, and settled when the call returned.
	LatePublishes int64
	// PoisonRows counts rows parked dead because every claim including them failed (a
	// value the server cannot render, a trigger that raises, a value the relay cannot
	// read); Dead counts them too.
	PoisonRows int64
	// AbandonedBatches counts batches dropped unpublished because the lease might have
	// expired while the batch was being claimed (a pause, a slow database).
	AbandonedBatches int64
	// WakeupListening reports that the wake-up listener (Config.Wakeup WakeupListen)
	// passed its start-up self-test: wake-ups arrive. False while it starts, after it
	// gave up (the relay then only polls), and with WakeupPoll.
	WakeupListening bool
	// Workers is how many batches the relay may run at once now: Config.Concurrency, or
	// with Concurrency unset its share of the default among the live relays of the
	// schema. With Concurrency unset, an ordered relay runs that many only while busy
	// (in the last second a claim came back full having cut an aggregate, or from a
	// worker that had not caught up for 100 ms; a batch went on without a slow call; or a
	// probe found a backlog), else one (ADR 0035, ADR 0037): ActiveWorkers.
	Workers int
	// ActiveWorkers is how many of them claim now: all of them, but one while an ordered
	// relay with Concurrency unset is not busy.
	ActiveWorkers int
	// BreakerOpenUntil is until when the breaker keeps the relay off its sink (it found
	// the sink down); zero while it is closed.
	BreakerOpenUntil time.Time
}

type counters struct {
	published, retried, dead, batches, breakerOpens, sinkDownBatches, errors, purged                         atomic.Int64
	leasesAcquired, leasesRescued, leasesLost, leasesReleased, fencedWrites, abandonedBatches, settleRetries atomic.Int64
	poisonRows, latePublishes, claims                                                                        atomic.Int64
}

func (c *counters) add(res batchResult) {
	c.published.Add(int64(res.published))
	c.retried.Add(int64(res.retried))
	c.dead.Add(int64(res.dead))
	c.batches.Add(1)
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	c := &r.stats
	return Stats{
		Published: c.published.Load(), Retried: c.retried.Load(), Dead: c.dead.Load(), Batches: c.batches.Load(),
		BreakerOpens: c.breakerOpens.Load(), SinkDownBatches: c.sinkDownBatches.Load(), Errors: c.errors.Load(),
		Purged: c.purged.Load(), LeasesAcquired: c.leasesAcquired.Load(), LeasesRescued: c.leasesRescued.Load(),
		LeasesLost: c.leasesLost.Load(), LeasesReleased: c.leasesReleased.Load(), FencedWrites: c.fencedWrites.Load(),
		AbandonedBatches: c.abandonedBatches.Load(), SettleRetries: c.settleRetries.Load(), PoisonRows: c.poisonRows.Load(), LatePublishes: c.latePublishes.Load(), Claims: c.claims.Load(),
		WakeupListening:  r.listener != nil && r.listener.selfTestResult() == selfTestPassed,
		Workers:          r.allowedWorkers(),
		ActiveWorkers:    r.activeWorkers(),
		BreakerOpenUntil: r.batches.breaker.until(),
	}
}
