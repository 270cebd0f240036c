package relay

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/outboxkit/outbox"
)

// settlement is the outcome of each message of a published batch (unclaim puts back
// the ones not published).
type settlement struct {
	seqs     []int64
	outcomes []string
	errs     []*string
	delays   []int64

	published, retried, dead int
	deadMsgs                 []deadMsg
	earliestRetry            time.Time
}

type deadMsg struct {
	msg    outbox.Message
	reason string
}

// maxErrorBytes bounds the error text stored in last_error.
const maxErrorBytes = 2000

// outcomes sorts the sink's results. down reports that the sink as a whole failed:
// nothing succeeded, and an error was marked Unavailable, the publish ran out of time,
// or failures span Config.BreakerMinAggregates distinct aggregates. Then nothing is
// settled and no attempt is counted.
func (r *Relay) outcomes(msgs []outbox.Message, results []error) (s settlement, down bool) {
	type aggKey struct{ typ, id string }
	failedAggs := map[aggKey]bool{}
	succeeded, sinkLevel := 0, false
	for i, err := range results {
		switch {
		case err == nil:
			succeeded++
		case outbox.IsUnavailable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			sinkLevel = true
		case errors.Is(err, outbox.ErrNotSent):
		default:
			failedAggs[aggKey{msgs[i].AggregateType, msgs[i].AggregateID}] = true
		}
	}
	if succeeded == 0 && (sinkLevel || len(failedAggs) >= r.cfg.BreakerMinAggregates) {
		return settlement{}, true
	}
	for i, err := range results {
		m := msgs[i]
		switch {
		case err == nil:
			s.add(m.Seq, "published", nil, 0)
			s.published++
		case outbox.IsUnavailable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, outbox.ErrNotSent):
			// Not the message's fault, or never sent: no attempt counted; it stays
			// pending, and in ordered mode behind its failed predecessor.
		case outbox.IsPermanent(err) || m.Attempt >= r.cfg.MaxAttempts:
			reason := truncate(err.Error())
			s.add(m.Seq, "dead", &reason, 0)
			s.dead++
			s.deadMsgs = append(s.deadMsgs, deadMsg{m, reason})
		default:
			reason := truncate(err.Error())
			delay := r.backoff(m.Attempt)
			s.add(m.Seq, "retry", &reason, delay.Milliseconds())
			s.retried++
			if at := time.Now().Add(delay); s.earliestRetry.IsZero() || at.Before(s.earliestRetry) {
				s.earliestRetry = at
			}
		}
	}
	return s, false
}

func (s *settlement) add(seq int64, outcome string, err *string, delayMS int64) {
	s.seqs = append(s.seqs, seq)
	s.outcomes = append(s.outcomes, outcome)
	s.errs = append(s.errs, err)
	s.delays = append(s.delays, delayMS)
}

// backoff is the delay after the attempt-th failed attempt: RetryBaseDelay doubled per
// attempt, capped at RetryMaxDelay, with equal jitter (between half and all of it).
func (r *Relay) backoff(attempt int) time.Duration {
	d := r.cfg.RetryBaseDelay
	for i := 1; i < attempt && d < r.cfg.RetryMaxDelay; i++ {
		d *= 2
	}
	d = min(d, r.cfg.RetryMaxDelay)
	return d/2 + rand.N(d/2+1) //nolint:gosec // jitter, not security
}

func truncate(s string) string {
	if len(s) <= maxErrorBytes {
		return s
	}
	cut := maxErrorBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

func firstError(results []error) error {
	for _, err := range results {
		if err != nil {
			return err
		}
	}
	return nil
}
