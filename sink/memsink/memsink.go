// Package memsink is an in-memory [outbox.Sink] for tests and demos. It records every
// message it delivers, and can be made slow ([Sink.Latency]), refuse chosen messages
// ([Sink.FailFunc]), go down as a whole ([Sink.SetDown]) or tell a test about each call
// ([Sink.OnPublish]).
//
//	sink := &memsink.Sink{}
//	// … run the relay with sink …
//	if err := sink.WaitFor(ctx, 3); err != nil { … }
//	msgs := sink.Messages()
package memsink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox"
)

// ErrDown is the error, wrapped by [outbox.Unavailable], of every message published
// while the sink is down.
var ErrDown = errors.New("sink is down")

// Delivery is one message the sink delivered.
type Delivery struct {
	Message outbox.Message
	// N numbers deliveries: 1 for the sink's first, then one more for each;
	// [Sink.Reset] does not restart it.
	N int64
	// At is when the message was delivered.
	At time.Time
}

// Sink is an in-memory [outbox.Sink]. The zero value is ready to use and delivers
// every message at once. Set FailFunc, Latency and OnPublish before the sink's first
// use and do not change them while Publish may run; the other methods are safe for
// concurrent use.
type Sink struct {
	// FailFunc, when set, is called before each message is delivered. When it returns
	// an error, that message fails with it (wrapped) and is not delivered, and the
	// later messages of its aggregate in the same call fail with [outbox.ErrNotSent].
	// Wrap the error with [outbox.Permanent] or [outbox.Unavailable] to simulate those
	// failures. FailFunc may keep state of its own, e.g. to fail a message only on its
	// first attempt; it may be called from several goroutines at once. Default nil:
	// nothing is refused.
	FailFunc func(outbox.Message) error

	// Latency is how long each message takes to deliver; the messages of a call are
	// delivered one after another. When ctx is done before a message is delivered,
	// that message fails. Default 0.
	Latency time.Duration

	// OnPublish, when set, is called at the end of each Publish call with the call's
	// messages and their results (one each, as Publish returns them), after the
	// delivered ones are recorded and before Publish returns. It must not change msgs
	// or errs. It may block, which holds the call (a test may keep calls in flight to
	// count them), and it may be called from several goroutines at once. Default nil.
	OnPublish func(msgs []outbox.Message, errs []error)

	mu         sync.Mutex
	deliveries []Delivery
	n          int64
	down       bool
	delivered  chan struct{} // closed at the next delivery; nil when nobody waits
}

// Publish delivers msgs in order and returns one result per message: nil when it was
// delivered, the error of FailFunc or ctx, an error wrapping [ErrDown] and marked
// [outbox.Unavailable] while the sink is down, or [outbox.ErrNotSent] after an earlier
// message of the same aggregate failed.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	failed := make(map[[2]string]bool)
	for i, m := range msgs {
		agg := [2]string{m.AggregateType, m.AggregateID}
		if failed[agg] && !s.isDown() {
			errs[i] = outbox.ErrNotSent
			continue
		}
		if err := s.deliver(ctx, m); err != nil {
			errs[i] = fmt.Errorf("deliver event %s: %w", m.ID, err)
			failed[agg] = true
		}
	}
	if s.OnPublish != nil {
		s.OnPublish(msgs, errs)
	}
	return errs
}

func (s *Sink) deliver(ctx context.Context, m outbox.Message) error {
	if s.isDown() {
		return outbox.Unavailable(ErrDown)
	}
	if err := wait(ctx, s.Latency); err != nil {
		return err
	}
	if s.FailFunc != nil {
		if err := s.FailFunc(m); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.deliveries = append(s.deliveries, Delivery{Message: clone(m), N: s.n, At: time.Now()})
	if s.delivered != nil {
		close(s.delivered)
		s.delivered = nil
	}
	return nil
}

// nextDelivery returns a channel closed at the next delivery. s.mu must be held.
func (s *Sink) nextDelivery() <-chan struct{} {
	if s.delivered == nil {
		s.delivered = make(chan struct{})
	}
	return s.delivered
}

// wait waits d, or until ctx is done; it fails when ctx is already done.
func wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetDown takes the sink down (true) or brings it back (false). While it is down,
// every message fails with an error wrapping [ErrDown], marked [outbox.Unavailable].
func (s *Sink) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *Sink) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// Deliveries returns a copy of the deliveries since the last [Sink.Reset], in order.
func (s *Sink) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	for i, d := range s.deliveries {
		d.Message = clone(d.Message)
		out[i] = d
	}
	return out
}

// Messages returns a copy of the messages delivered since the last [Sink.Reset], in
// order of delivery.
func (s *Sink) Messages() []outbox.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messages()
}

// messages is [Sink.Messages]; s.mu must be held.
func (s *Sink) messages() []outbox.Message {
	out := make([]outbox.Message, len(s.deliveries))
	for i, d := range s.deliveries {
		out[i] = clone(d.Message)
	}
	return out
}

// Count returns the number of messages delivered since the last [Sink.Reset].
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.deliveries)
}

// Reset forgets the deliveries so far. Delivery numbers keep increasing.
func (s *Sink) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.deliveries) // keeps the capacity: a sink reset after every batch does not grow it again
	s.deliveries = s.deliveries[:0]
}

// WaitFor blocks until at least n messages were delivered since the last
// [Sink.Reset], or ctx is done.
func (s *Sink) WaitFor(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		have, delivered := len(s.deliveries), s.nextDelivery()
		s.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-delivered:
		case <-ctx.Done():
			return fmt.Errorf("wait for %d deliveries (have %d): %w", n, s.Count(), ctx.Err())
		}
	}
}

// WaitUntil blocks until cond holds on the messages delivered since the last
// [Sink.Reset], or ctx is done, and returns those messages. cond is called at once and
// again after deliveries, from the waiting goroutine, each time with a copy of every
// message delivered so far, in order of delivery, as [Sink.Messages] returns them (for
// a count alone, [Sink.WaitFor] copies nothing). When ctx is done first, it returns the
// messages cond saw last, with an error wrapping ctx's.
func (s *Sink) WaitUntil(ctx context.Context, cond func(msgs []outbox.Message) bool) ([]outbox.Message, error) {
	for {
		s.mu.Lock()
		msgs, delivered := s.messages(), s.nextDelivery()
		s.mu.Unlock()
		if cond(msgs) {
			return msgs, nil
		}
		select {
		case <-delivered:
		case <-ctx.Done():
			return msgs, fmt.Errorf("wait for a condition on the deliveries (have %d): %w", len(msgs), ctx.Err())
		}
	}
}

// clone copies m's payload and headers, so neither the caller's later changes nor a
// reader's reach the record.
func clone(m outbox.Message) outbox.Message {
	m.Payload = slices.Clone(m.Payload)
	m.Headers = maps.Clone(m.Headers)
	return m
}
