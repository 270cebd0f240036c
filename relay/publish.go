package relay

import (
	"context"
	"fmt"
	"sync"

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
// budget. The batch's aggregates are spread over up to Config.PublishCalls Publish calls
// made at once, each aggregate's messages in one call and in order, so a sink that
// publishes one message after another, or one message that hangs, holds up only the
// aggregates of its own call. It returns an error only when the sink broke its contract
// (not one result per message).
func (b *batcher) publish(ctx context.Context, msgs []outbox.Message) (published, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	defer cancel()
	calls := spread(msgs, b.cfg.PublishCalls)
	p := published{errs: make([]error, len(msgs)), late: make([]bool, len(msgs)), call: make([]int, len(msgs))}
	if len(calls) == 1 {
		return p, b.call(ctx, msgs, 0, nil, p)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for c, idx := range calls {
		wg.Go(func() {
			part := make([]outbox.Message, len(idx))
			for i, j := range idx {
				part[i] = msgs[j]
			}
			if err := b.call(ctx, part, c, idx, p); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return p, firstErr
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
		k := aggregateKey{m.AggregateType, m.AggregateID}
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
