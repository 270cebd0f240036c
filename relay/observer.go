package relay

import (
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// Observer receives what a relay did, for metrics (cmd/outbox exports them to
// Prometheus) without the core depending on a metrics SDK. Set it in Config.Observer.
// Its methods are called from the relay's workers, concurrently and synchronously:
// they must be safe for concurrent use, quick, and must not block.
type Observer interface {
	// BatchSettled is called after a batch's transaction committed, with the outcome
	// of each event it settled. Events whose Publish call outlived the batch are
	// reported by a later call of their own (Late set).
	BatchSettled(BatchReport)
}

// BatchReport is what one settled batch did.
type BatchReport struct {
	// Duration is the batch's time from the start of its claim to its commit (0 for a
	// Late report).
	Duration time.Duration
	// Late reports events whose Publish call returned after their batch committed.
	Late bool
	// Events are the batch's settled events, in claim order.
	Events []EventReport
}

// Outcome is what became of one event in a batch.
type Outcome string

// The outcomes of an [EventReport].
const (
	// OutcomePublished: the sink acknowledged it.
	OutcomePublished Outcome = "published"
	// OutcomeRetried: the attempt failed; it is pending again after a backoff.
	OutcomeRetried Outcome = "retried"
	// OutcomeDead: out of attempts or failed permanently.
	OutcomeDead Outcome = "dead"
	// OutcomeNotAttempted: not sent or not counted (behind a failed event of its
	// aggregate, the sink down for it); pending again.
	OutcomeNotAttempted Outcome = "not_attempted"
)

// EventReport is one event of a [BatchReport].
type EventReport struct {
	ID            uuid.UUID
	EventType     string
	AggregateType string
	// Attempt is the attempt this was (1 for the first).
	Attempt int
	Outcome Outcome
	// CreatedAt is when the event was written: time.Since(CreatedAt) at a published
	// report is the commit → acknowledgement latency.
	CreatedAt time.Time
}

// observe reports the settled messages to the configured Observer: each message's
// outcome is the one in s, published when s lists none (the claim's mark stands).
func (b *batcher) observe(start time.Time, late bool, msgs []outbox.Message, s *settlement) {
	obs := b.cfg.Observer
	if obs == nil || len(msgs) == 0 {
		return
	}
	bySeq := make(map[int64]outcome, len(s.outcomes.Seqs))
	for i, seq := range s.outcomes.Seqs {
		bySeq[seq] = outcome(s.outcomes.Outcomes[i])
	}
	rep := BatchReport{Late: late, Events: make([]EventReport, 0, len(msgs))}
	if !late {
		rep.Duration = time.Since(start)
	}
	for _, m := range msgs {
		o := OutcomePublished
		switch bySeq[m.Seq] {
		case outcomeRetry:
			o = OutcomeRetried
		case outcomeDead:
			o = OutcomeDead
		case outcomeHeld:
			continue // reported when its call returns
		case outcomeDeferred, outcomeUntouched:
			o = OutcomeNotAttempted
		}
		rep.Events = append(rep.Events, EventReport{
			ID: m.ID, EventType: m.EventType, AggregateType: m.AggregateType, Attempt: m.Attempt,
			Outcome: o, CreatedAt: m.CreatedAt,
		})
	}
	obs.BatchSettled(rep)
}
