package inbox

import (
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// Observer receives what a [Consumer] did, for metrics (processed, duplicates, stale,
// parked, unparked, quarantined, errors, handler time, lag) without package inbox
// depending on a metrics SDK: the same shape as the relay's Observer. Set it in
// [Config.Observer]. Processed is called synchronously by the goroutine that called
// Process, ProcessSQL, ProcessSQLTx or Replay, just before that call returns: it must be
// safe for concurrent use, quick, and must not block.
type Observer interface {
	// Processed is called once per call that reached the database or refused the
	// message (a nil db or handler is not reported; nor is a Replay of an event not in
	// the quarantine). The counts of all reports add up to [Consumer.Stats].
	Processed(Report)
}

// Report is what one call did. Its counts are those of the call's transaction,
// reported once it committed (for a pgx.Tx or ProcessSQLTx: when the call returns);
// on an error they are zero and Err is set.
type Report struct {
	// Consumer is the consumer's name.
	Consumer string
	// EventID, EventType, AggregateType and AggregateVersion are the message's.
	EventID          uuid.UUID
	EventType        string
	AggregateType    string
	AggregateVersion int64
	// Outcome is what became of the message itself; zero when Err is set.
	Outcome Outcome
	// Applied counts the events applied: the message, and those it unparked.
	Applied int
	// Duplicates is 1 when the message was processed before.
	Duplicates int
	// Stale counts events skipped at or below their aggregate's version: the message,
	// or parked events it overtook under GapApply.
	Stale int
	// Parked is 1 when the message was parked past a gap.
	Parked int
	// Unparked counts the parked events applied after the message (Result.Unparked).
	Unparked int
	// Quarantined counts the events quarantined: the message, or an unparked event.
	Quarantined int
	// Replayed is 1 when a Replay applied the quarantined event.
	Replayed int
	// Err is the call's error: nothing was recorded. errors.Is(Err, ErrGap) for an
	// event refused under GapRetry (counted in Stats.GapRetries, the others in
	// Stats.Errors).
	Err error
	// HandlerDuration is the time spent in the handler, over every event it ran in
	// the call (the message and those it unparked), also on an error.
	HandlerDuration time.Duration
	// Duration is the whole call's time, the transaction's commit included.
	Duration time.Duration
	// Lag is how old the message was at its commit (now minus CreatedAt) when it was
	// applied and has a CreatedAt; else 0.
	Lag time.Duration
}

// observe reports one call to the configured Observer.
func (c *Consumer) observe(start time.Time, msg outbox.Message, res Result, st *tally, lag time.Duration, err error) {
	if c.observer == nil {
		return
	}
	r := Report{
		Consumer: c.name, EventID: msg.ID, EventType: msg.EventType, AggregateType: msg.AggregateType,
		AggregateVersion: msg.AggregateVersion, Outcome: res.Outcome, Err: err, Duration: time.Since(start), Lag: lag,
	}
	if st != nil {
		r.HandlerDuration = st.handler
		if err == nil {
			r.Applied, r.Duplicates, r.Stale = int(st.applied), int(st.duplicates), int(st.stale)
			r.Parked, r.Unparked, r.Replayed = int(st.parked), int(st.unparked), int(st.replayed)
			r.Quarantined = len(st.quarantined)
		}
	}
	c.observer.Processed(r)
}
