package inbox

import (
	"sync/atomic"
	"time"
)

// Stats counts what a [Consumer] has done since it was created. Events are counted when
// the call that processed them returned without an error (on a pool: committed).
type Stats struct {
	// Applied counts events whose handler's work committed, unparked ones included.
	Applied int64
	// Duplicates counts deliveries of events already processed.
	Duplicates int64
	// Stale counts events at or below their aggregate's last applied version, skipped
	// (parked events overtaken under GapApply included).
	Stale int64
	// Parked counts events stored past a gap; Unparked those of them applied since.
	Parked, Unparked int64
	// Quarantined counts events stored in the quarantine (again on each failed replay).
	Quarantined int64
	// Replayed counts quarantined events taken out by Replay and applied.
	Replayed int64
	// GapRetries counts events refused under GapRetry.
	GapRetries int64
	// Errors counts calls that failed otherwise (handler errors, database errors,
	// invalid messages): nothing of them was recorded. A commit whose answer was lost
	// counts here too; its redelivery is then a duplicate.
	Errors int64
	// Lag is how old the last applied event was when its transaction committed: the
	// commit time minus the event's CreatedAt. Zero before the first applied event, and
	// for events without a CreatedAt.
	Lag time.Duration
}

type counters struct {
	applied, duplicates, stale, parked, unparked, quarantined, replayed, gapRetries, errors atomic.Int64
	lag                                                                                     atomic.Int64 // nanoseconds
}

// tally is what one transaction did, added to the counters once it committed (an
// attempt of pgx.BeginFunc that rolled back counts nothing).
type tally struct {
	applied, duplicates, stale, parked, unparked, replayed int64
	quarantined                                            []quarantineRecord
	handler                                                time.Duration // in the handler, all its calls
}

func (c *counters) add(t *tally) {
	c.applied.Add(t.applied)
	c.duplicates.Add(t.duplicates)
	c.stale.Add(t.stale)
	c.parked.Add(t.parked)
	c.unparked.Add(t.unparked)
	c.replayed.Add(t.replayed)
	c.quarantined.Add(int64(len(t.quarantined)))
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Applied: s.applied.Load(), Duplicates: s.duplicates.Load(), Stale: s.stale.Load(),
		Parked: s.parked.Load(), Unparked: s.unparked.Load(), Quarantined: s.quarantined.Load(),
		Replayed: s.replayed.Load(), GapRetries: s.gapRetries.Load(), Errors: s.errors.Load(),
		Lag: time.Duration(s.lag.Load()),
	}
}
