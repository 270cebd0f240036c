package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Sink kinds a relay child publishes to.
const (
	sinkMem        = "mem"         // memsink, no latency
	sinkMemLatency = "mem-latency" // memsink with Latency: messages one after another
	sinkAggLatency = "agg-latency" // latency per message, aggregates concurrently
	sinkRecord     = "record"      // records when each message arrived
	// sinkRecordStall records as sinkRecord, but holds the first message of type
	// stallEventType it sees (and its aggregate's later messages of the call) for Latency
	sinkRecordStall = "record-stall"
)

// counter wraps a sink: it counts the messages acknowledged and, when order is set,
// counts order violations (a message of an aggregate arriving after a later-written one
// of the same aggregate). One counter is shared by every relay of a child.
type counter struct {
	order      bool
	acked      atomic.Int64
	violations atomic.Int64
	mu         sync.Mutex
	last       map[[2]string]int64 // aggregate → highest seq seen
}

func newCounter(order bool) *counter { return &counter{order: order, last: map[[2]string]int64{}} }

// countingSink publishes through inner and reports the acknowledged messages to c.
type countingSink struct {
	inner outbox.Sink
	c     *counter
	// reset, when set, forgets the inner memsink's deliveries after every call, so the
	// sink's own records do not grow the process's memory with the backlog.
	reset func()
}

func (s *countingSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := s.inner.Publish(ctx, msgs)
	if s.reset != nil {
		s.reset()
	}
	var n int64
	if s.c.order {
		s.c.mu.Lock()
	}
	for i, err := range errs {
		if err != nil {
			continue
		}
		n++
		if s.c.order && msgs[i].Seq != 0 { // an emitted event (table-less) has no seq: the cdc tests check its order
			k := [2]string{msgs[i].AggregateType, msgs[i].AggregateID}
			if msgs[i].Seq <= s.c.last[k] {
				s.c.violations.Add(1)
			}
			s.c.last[k] = max(s.c.last[k], msgs[i].Seq)
		}
	}
	if s.c.order {
		s.c.mu.Unlock()
	}
	s.c.acked.Add(n)
	return errs
}

// aggLatencySink takes latency per message, one message after another within an
// aggregate (the order the contract requires) but the aggregates of a call
// concurrently, as a broker client pipelining per partition would.
type aggLatencySink struct{ latency time.Duration }

func (s aggLatencySink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	groups := map[[2]string][]int{}
	var keys [][2]string
	for i, m := range msgs {
		k := [2]string{m.AggregateType, m.AggregateID}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			failed := false
			for _, i := range groups[k] {
				if failed {
					errs[i] = outbox.ErrNotSent
					continue
				}
				if err := sleepCtx(ctx, s.latency); err != nil {
					errs[i] = fmt.Errorf("publish event %s: %w", msgs[i].ID, err)
					failed = true
				}
			}
		})
	}
	wg.Wait()
	return errs
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// receipt is when a message reached the recording sink.
type receipt struct {
	id uuid.UUID
	at int64 // wall clock, unix ns
}

// recordSink acknowledges every message and records when it arrived (time.Now at
// the start of Publish: the moment the relay hands the message over).
type recordSink struct {
	mu       sync.Mutex
	receipts []receipt
}

func (s *recordSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	at := time.Now().UnixNano()
	s.mu.Lock()
	for _, m := range msgs {
		s.receipts = append(s.receipts, receipt{m.ID, at})
	}
	s.mu.Unlock()
	return make([]error, len(msgs))
}

// stallingRecordSink records as its recordSink does, but holds the first message of type
// stallEventType it is given, once, for hold: that message and the later messages of its
// aggregate in the call are received after the hold, the call's other messages at
// once — as a broker client that pipelines aggregates would.
type stallingRecordSink struct {
	rec     *recordSink
	hold    time.Duration
	stalled atomic.Bool
}

func (s *stallingRecordSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	at := time.Now().UnixNano()
	errs := make([]error, len(msgs))
	var now, held []uuid.UUID
	var heldAgg [2]string
	holding := false
	for _, m := range msgs {
		k := [2]string{m.AggregateType, m.AggregateID}
		if !holding && m.EventType == stallEventType && s.stalled.CompareAndSwap(false, true) {
			holding, heldAgg = true, k
		}
		if holding && k == heldAgg {
			held = append(held, m.ID)
			continue
		}
		now = append(now, m.ID)
	}
	s.rec.received(now, at)
	if !holding {
		return errs
	}
	if err := sleepCtx(ctx, s.hold); err != nil {
		for i, m := range msgs {
			if [2]string{m.AggregateType, m.AggregateID} == heldAgg {
				errs[i] = fmt.Errorf("publish event %s: %w", m.ID, err)
			}
		}
		return errs
	}
	s.rec.received(held, time.Now().UnixNano())
	return errs
}

// received records ids as arrived at unix-ns at.
func (s *recordSink) received(ids []uuid.UUID, at int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.receipts = append(s.receipts, receipt{id, at})
	}
}

// writeTo writes one "id unix-ns" line per receipt to the file at path.
func (s *recordSink) writeTo(path string) error {
	f, err := os.Create(path) //nolint:gosec // a temporary file the parent named
	if err != nil {
		return fmt.Errorf("create receipts file: %w", err)
	}
	w := bufio.NewWriter(f)
	s.mu.Lock()
	for _, r := range s.receipts {
		_, _ = fmt.Fprintf(w, "%s %d\n", r.id, r.at) // a write error shows at Flush
	}
	s.mu.Unlock()
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write receipts: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write receipts: %w", err)
	}
	return nil
}

// newSink returns the sink of kind for one relay of a child, counting into c.
func newSink(kind string, latency time.Duration, c *counter, rec *recordSink) (outbox.Sink, error) {
	switch kind {
	case sinkMem, sinkMemLatency:
		m := &memsink.Sink{}
		if kind == sinkMemLatency {
			m.Latency = latency
		}
		return &countingSink{inner: m, c: c, reset: m.Reset}, nil
	case sinkAggLatency:
		return &countingSink{inner: aggLatencySink{latency}, c: c}, nil
	case sinkRecord:
		return &countingSink{inner: rec, c: c}, nil
	case sinkRecordStall:
		return &countingSink{inner: &stallingRecordSink{rec: rec, hold: latency}, c: c}, nil
	}
	return nil, fmt.Errorf("unknown sink kind %q", kind)
}
