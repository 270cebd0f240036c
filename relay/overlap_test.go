package relay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// overlapSink finds the sink down for aggregate "down" and holds every call that has a
// message of aggregate "slow" until the call's context ends, counting the times two
// such calls were in flight at once.
type overlapSink struct {
	slowCalls, inFlight, overlaps atomic.Int32
}

func (s *overlapSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	slow := false
	for i, m := range msgs {
		switch m.AggregateID {
		case "down":
			errs[i] = outbox.Unavailable(errors.New("broker connection refused"))
		case "slow":
			slow = true
		}
	}
	if !slow {
		return errs
	}
	s.slowCalls.Add(1)
	if s.inFlight.Add(1) > 1 {
		s.overlaps.Add(1)
	}
	defer s.inFlight.Add(-1)
	<-ctx.Done()
	for i, m := range msgs {
		if m.AggregateID == "slow" {
			errs[i] = ctx.Err()
		}
	}
	return errs
}

// A batch that goes on without its slowest Publish call and then ends without holding
// that call's rows — here it rolls back, the sink found down by the call that returned
// — cancels the call and waits for it before the rows can be claimed again: an
// aggregate never has two Publish calls in flight (the sink contract), however often
// the relay claims it again. (The call used to be left running while the next claims
// took its rows, one more call each time.)
func TestBatchEndingWithoutItsSlowCallsEndsThemFirst(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"down", "slow"}, 1)
	sink := &overlapSink{}
	cfg := fastConfig()
	// long enough that the down call has always returned by then (else the batch goes on
	// without both calls, ADR 0033, and the slow one is held for its whole budget)
	cfg.SlowPublish = 200 * time.Millisecond
	cfg.BatchTimeout = 10 * time.Second // a held call would outlive many claims
	cfg.BreakerInitialDelay, cfg.BreakerMaxDelay = 20*time.Millisecond, 20*time.Millisecond
	start(t, newRelay(t, pool, sink, cfg))
	waitUntil(t, 10*time.Second, "the slow aggregate claimed 5 times", func() bool { return sink.slowCalls.Load() >= 5 })
	if n := sink.overlaps.Load(); n > 0 {
		t.Fatalf("%d times a Publish call for aggregate slow started while another was in flight", n)
	}
}
