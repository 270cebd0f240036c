package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/outboxkit/outbox"
)

// settlement is what classify decided for each message of a published batch: the
// outcome of every message not published (and of those published), in the form the
// settle statements take; settle puts back the rows not published.
type settlement struct {
	outcomes rowOutcomes

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

// failure is the class of one message's result.
type failure int

const (
	acked     failure = iota // published
	notSent                  // not tried, or not the message's fault: no attempt counted
	permanent                // retrying cannot help: dead at once
	transient                // this message failed: an attempt counted, backoff
	timedOut                 // its call ran out of the batch's time: as transient
	sinkDown                 // the sink as a whole failed (Unavailable, a connection error)
)

// failures sorts each message's result into its class. Only the relay's own deadline makes a context
// error "not attempted" — and then only for the messages of a cut-off call after its
// first unacknowledged one, which is taken to be the message that held the call up (a
// sink may publish one message after another). A timeout the sink's own client reported
// while the batch had time left is that message's failure.
func failures(msgs []outbox.Message, p published) []failure {
	classes := make([]failure, len(msgs))
	blamed := map[int]bool{} // cut-off calls whose first unacknowledged message was blamed
	for i, err := range p.errs {
		switch {
		case err == nil:
			classes[i] = acked
		case outbox.IsPermanent(err):
			classes[i] = permanent
		case outbox.IsUnavailable(err):
			classes[i] = sinkDown
		case errors.Is(err, outbox.ErrNotSent):
			classes[i] = notSent
		case p.late[i] && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
			classes[i] = notSent
			if !blamed[p.call[i]] {
				blamed[p.call[i]] = true
				classes[i] = timedOut
			}
		case isConnectionError(err):
			classes[i] = sinkDown
		default:
			classes[i] = transient
		}
	}
	return classes
}

// isConnectionError reports whether err says the connection to the broker failed (a
// refused dial, a reset or broken connection, EOF on a connection the far end closed) —
// the sink being down, whether or not the sink wrapped it with [outbox.Unavailable]. A
// timeout is not one: a slow answer is the message's failure.
func isConnectionError(err error) bool {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return !dnsErr.IsNotFound // a name that does not exist is that message's destination
	}
	for _, target := range []error{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN,
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// classify decides what becomes of each message after the sink's results. down reports that the sink as a whole failed:
// nothing succeeded, and a message failed with [outbox.Unavailable] or a connection
// error, or messages of at least Config.BreakerMinAggregates distinct aggregates failed
// (transiently or by running out of time; a Permanent refusal is never an outage), or
// any failed while the breaker was open (the sink was last seen down). Then
// nothing is settled and no attempt is counted. When something succeeded, a message
// that hit the sink being down counts no attempt either, but waits before it is tried
// again.
func (b *batcher) classify(msgs []outbox.Message, p published) (s settlement, down bool) {
	classes := failures(msgs, p)
	failedAggs := map[aggregateKey]bool{}
	succeeded, sinkLevel := 0, false
	for i, c := range classes {
		switch c {
		case acked:
			succeeded++
		case sinkDown:
			sinkLevel = true
		case transient, timedOut:
			failedAggs[keyOf(msgs[i])] = true
		}
	}
	// While the breaker is open (this batch probes a sink last seen down), a batch in
	// which nothing succeeded is the outage going on, however few aggregates it holds.
	stillDown := b.breaker.open() && len(failedAggs) > 0
	if succeeded == 0 && (sinkLevel || stillDown || len(failedAggs) >= b.cfg.BreakerMinAggregates) {
		return settlement{}, true
	}
	return b.decide(msgs, p, classes), false
}

// decide turns each message's class into its outcome.
func (b *batcher) decide(msgs []outbox.Message, p published, classes []failure) (s settlement) {
	for i, c := range classes {
		m, err := msgs[i], p.errs[i]
		if c == timedOut {
			err = fmt.Errorf("publish did not finish within the batch's time (BatchTimeout %s): %w", b.cfg.BatchTimeout, err)
		}
		switch {
		case c == acked:
			s.add(m.Seq, outcomePublished, nil, 0)
			s.published++
		case c == notSent:
			// Never sent, or cut off behind the message that held its call up: no attempt
			// counted; it stays pending, and in ordered mode behind its predecessor.
			s.add(m.Seq, outcomeUntouched, nil, 0)
		case c == sinkDown:
			reason := truncate(err.Error())
			s.add(m.Seq, outcomeDeferred, &reason, b.backoff(m.Attempt).Milliseconds())
		case c == permanent || m.Attempt >= b.cfg.MaxAttempts:
			reason := truncate(err.Error())
			s.add(m.Seq, outcomeDead, &reason, 0)
			s.dead++
			s.deadMsgs = append(s.deadMsgs, deadMsg{m, reason})
		default:
			reason := truncate(err.Error())
			delay := b.backoff(m.Attempt)
			if asked, ok := outbox.RetryAfterOf(err); ok {
				delay = max(delay, asked) // the broker asked for a pause: the longer wins
			}
			s.add(m.Seq, outcomeRetry, &reason, delay.Milliseconds())
			s.retried++
			if at := time.Now().Add(delay); s.earliestRetry.IsZero() || at.Before(s.earliestRetry) {
				s.earliestRetry = at
			}
		}
	}
	return s
}

func (s *settlement) add(seq int64, o outcome, err *string, delayMS int64) {
	s.outcomes.add(seq, o, err, delayMS)
}

// backoff is the delay after the attempt-th failed attempt: RetryBaseDelay doubled per
// attempt, capped at RetryMaxDelay, with equal jitter (between half and all of it).
func (b *batcher) backoff(attempt int) time.Duration {
	d := b.cfg.RetryBaseDelay
	for i := 1; i < attempt && d < b.cfg.RetryMaxDelay; i++ {
		d *= 2
	}
	d = min(d, b.cfg.RetryMaxDelay)
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

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
