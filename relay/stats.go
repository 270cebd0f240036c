package relay

import "sync/atomic"

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
	// BreakerOpens counts transitions of the breaker from closed to open.
	BreakerOpens int64
	// SinkDownBatches counts batches abandoned because the sink was down.
	SinkDownBatches int64
	// Errors counts batches that failed on the database side.
	Errors int64
	// Purged counts events removed by retention (archived ones included).
	Purged int64
}

type counters struct {
	published, retried, dead, batches, breakerOpens, sinkDownBatches, errors, purged atomic.Int64
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
		Purged: c.purged.Load(),
	}
}
