package relay

import (
	"context"
	"fmt"
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
// When some calls have returned and the others are still running long after —
// SlowPublish, or four times as long as the first call took, whichever is longer —
// publish returns without them: the batch settles what returned, and the calls still
// running (inFlight) are waited for and settled after it (batcher.settleLate). It returns
// an error only when the sink broke its contract (not one result per message).
func (b *batcher) publish(ctx context.Context, msgs []outbox.Message) (published, *inFlight, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	if b.cfg.Mode == Unordered {
		ctx = outbox.WithoutOrder(ctx)
	}
	calls := spread(msgs, b.cfg.PublishCalls)
	p := published{errs: make([]error, len(msgs)), late: make([]bool, len(msgs)), call: make([]int, len(msgs))}
	if len(calls) == 1 {
		defer cancel()
		return p, nil, b.call(ctx, msgs, 0, nil, p)
	}
	type result struct {
		call int
		err  error
	}
	finished := make(chan result, len(calls))
	started := time.Now()
	for c, idx := range calls {
		go func() {
			part := make([]outbox.Message, len(idx))
			for i, j := range idx {
				part[i] = msgs[j]
			}
			finished <- result{c, b.call(ctx, part, c, idx, p)}
		}()
	}
	var (
		firstErr error
		cut      <-chan time.Time
		returned = make([]bool, len(calls))
	)
	for n := 0; n < len(calls); {
		select {
		case r := <-finished:
			n++
			returned[r.call] = true
			if r.err != nil {
				firstErr = r.err
			}
			if cut == nil && n < len(calls) {
				cut = time.After(max(b.cfg.SlowPublish, 4*time.Since(started)) - time.Since(started))
			}
		case <-cut:
			f := &inFlight{done: make(chan struct{}), cancel: cancel}
			for c, idx := range calls {
				if !returned[c] {
					f.msgs = append(f.msgs, idx...)
				}
			}
			pending := len(calls) - n
			go func() {
				for range pending {
					if r := <-finished; r.err != nil {
						f.err = r.err
					}
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
}

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
