package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox"
)

// published is what the sink said of each message of a batch.
type published struct {
	errs []error
	// late reports, per message, that its Publish call returned only after the batch's
	// time budget ran out (the relay cut it off).
	late []bool
	// call numbers, per message, the Publish call it was in.
	call []int
}

// publish hands a batch's messages (in seq order) to the sink within the batch's time
// budget (ctx: the relay's, not the batch's, so calls can outlive the batch; see below).
// The batch's aggregates are spread over up to Config.PublishCalls Publish calls made at
// once, each aggregate's messages in one call and in order, so a sink that publishes one
// message after another, or one message that hangs, holds up only the aggregates of its
// own call.
//
// Calls still running long after they should have returned are not waited for: publish
// returns without them, the batch settles what returned, and the calls still running
// (inFlight) are waited for and settled after it (batcher.settleLate). Long after is:
//   - when some calls have returned: SlowPublish, or four times as long as the first
//     call took, whichever is longer;
//   - when none has, and cut is not nil: SlowPublish, or four times as long as the
//     sink's calls usually take (callTimes), whichever is longer — a batch of one
//     aggregate, or of one slow call, holds up its own aggregates only (ADR 0033). At
//     most one such batch per cut (a worker's) is in flight at a time: while one is, the
//     next waits for its calls, so a sink that hangs on every call is found down by a
//     batch of its own, as before, rather than holding every aggregate of the relay in
//     flight one batch after another.
//
// It returns an error only when the sink broke its contract (not one result per
// message).
func (b *batcher) publish(ctx context.Context, msgs []outbox.Message, cut *atomic.Bool) (published, *inFlight, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	if b.cfg.Mode == Unordered {
		ctx = outbox.WithoutOrder(ctx)
	}
	calls := spread(msgs, b.cfg.PublishCalls)
	p := published{errs: make([]error, len(msgs)), late: make([]bool, len(msgs)), call: make([]int, len(msgs))}
	type result struct {
		call int
		err  error
	}
	finished := make(chan result, len(calls))
	started := time.Now()
	for c, idx := range calls {
		go func() {
			part := msgs
			if idx != nil {
				part = make([]outbox.Message, len(idx))
				for i, j := range idx {
					part[i] = msgs[j]
				}
			}
			finished <- result{c, b.call(ctx, part, c, idx, p)}
		}()
	}
	var (
		firstErr error
		returned = make([]bool, len(calls))
		// wait: when the calls still running are given up on; nil: not before they return
		wait  = time.NewTimer(max(b.cfg.SlowPublish, 4*b.callTimes.typical()))
		whole *atomic.Bool // the slot a batch that went on without every call holds
	)
	defer wait.Stop()
	if cut == nil {
		wait.Stop()
	}
	for n := 0; n < len(calls); {
		select {
		case r := <-finished:
			b.callTimes.note(time.Since(started)) // a call back while its batch waits: how long calls take
			n++
			returned[r.call] = true
			if r.err != nil {
				firstErr = r.err
			}
			if n == 1 && n < len(calls) {
				wait.Reset(max(b.cfg.SlowPublish, 4*time.Since(started)) - time.Since(started))
			}
		case <-wait.C:
			if n == 0 {
				if !cut.CompareAndSwap(false, true) {
					continue // another batch of the slot went on without its calls: wait for a call
				}
				whole = cut
			}
			pending := len(calls) - n
			f := &inFlight{done: make(chan struct{}), cancel: cancel, whole: whole != nil, calls: pending, returned: make(chan callReturn, pending), wentOn: time.Now()}
			messagesOf := func(c int) []int {
				if calls[c] != nil {
					return calls[c]
				}
				all := make([]int, len(msgs)) // the one call: every message
				for i := range all {
					all[i] = i
				}
				return all
			}
			for c := range calls {
				if !returned[c] {
					f.msgs = append(f.msgs, messagesOf(c)...)
				}
			}
			go func() {
				for range pending {
					r := <-finished
					if r.err != nil {
						f.err = r.err
					}
					f.returned <- callReturn{messagesOf(r.call), r.err}
				}
				if whole != nil {
					whole.Store(false)
				}
				close(f.done)
			}()
			return p, f, firstErr
		}
	}
	cancel()
	return p, nil, firstErr
}

// inFlight is the Publish calls of a batch still running when the batch went on without
// them.
type inFlight struct {
	msgs   []int         // the indexes, in the batch, of their messages
	done   chan struct{} // closed when every one of them has returned
	err    error         // a contract error of one of them; read after done
	cancel context.CancelFunc
	// whole: no call of the batch had returned, so the batch did not find the sink up:
	// their results may still show it down (settleLate classifies them as a batch's)
	whole bool
	// calls is how many calls there are; returned receives each one as it returns
	calls    int
	returned chan callReturn
	wentOn   time.Time // when the batch went on without them
}

// callReturn is a Publish call that returned after its batch went on without it: the
// indexes, in the batch, of its messages, and its contract error.
type callReturn struct {
	msgs []int
	err  error
}

// callTimes keeps how long the sink's Publish calls usually take: a moving average of
// the calls that returned while their batch waited for them (each new one weighs 1/8) —
// not of those it went on without, so one hang does not stretch the next cut-offs.
type callTimes struct{ avg atomic.Int64 }

func (t *callTimes) note(d time.Duration) {
	for {
		old := t.avg.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if t.avg.CompareAndSwap(old, next) {
			return
		}
	}
}

func (t *callTimes) typical() time.Duration { return time.Duration(t.avg.Load()) }

// call makes Publish call number c with part, whose messages are msgs[idx[i]] of the
// batch (idx nil: part is the whole batch), and records the results in p.
func (b *batcher) call(ctx context.Context, part []outbox.Message, c int, idx []int, p published) error {
	errs := b.sink.Publish(ctx, part)
	late := ctx.Err() != nil
	if len(errs) != len(part) {
		return fmt.Errorf("sink returned %d results for %d messages (a sink bug): batch abandoned", len(errs), len(part))
	}
	for i, err := range errs {
		j := i
		if idx != nil {
			j = idx[i]
		}
		p.errs[j], p.late[j], p.call[j] = err, late, c
	}
	return nil
}

// spread divides a batch's messages among at most n Publish calls, by aggregate: the
// aggregates are dealt out in order of first appearance, so each call gets a fair share
// and each aggregate's messages stay in one call, in order. It returns the messages'
// indexes per call.
func spread(msgs []outbox.Message, n int) [][]int {
	if n <= 1 || len(msgs) <= 1 {
		return [][]int{nil}
	}
	callOf := make(map[aggregateKey]int, min(len(msgs), 1024))
	var calls [][]int
	next := 0
	for i, m := range msgs {
		k := keyOf(m)
		c, ok := callOf[k]
		if !ok {
			c = next % n
			next++
			callOf[k] = c
			if c == len(calls) {
				calls = append(calls, nil)
			}
		}
		calls[c] = append(calls[c], i)
	}
	if len(calls) == 1 {
		return [][]int{nil}
	}
	return calls
}

// aggregateKey identifies an aggregate.
type aggregateKey struct{ typ, id string }

func keyOf(m outbox.Message) aggregateKey { return aggregateKey{m.AggregateType, m.AggregateID} }
