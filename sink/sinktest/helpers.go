package sinktest

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// Reroute returns a sink that hands sink copies of the messages, each with its Topic
// set to topic(m) — for a harness whose subtests must not share a broker's topics
// (give every Topic a prefix of the subtest's own), or whose FailWhen routes the
// refused messages to a destination the broker refuses. Everything else about the
// messages is left as it was.
func Reroute(sink outbox.Sink, topic func(m outbox.Message) string) outbox.Sink {
	return reroute{sink, topic}
}

type reroute struct {
	sink  outbox.Sink
	topic func(outbox.Message) string
}

func (r reroute) Publish(ctx context.Context, msgs []outbox.Message) []error {
	changed := slices.Clone(msgs)
	for i := range changed {
		changed[i].Topic = r.topic(changed[i])
	}
	return r.sink.Publish(ctx, changed)
}

// Refusals holds the refusal function of a harness's FailWhen, safe to read from
// Publish calls while FailWhen is not running. The zero value refuses nothing.
type Refusals struct {
	f atomic.Pointer[func(outbox.Message) bool]
}

// Set is the Harness.FailWhen function.
func (r *Refusals) Set(refuse func(outbox.Message) bool) {
	if refuse == nil {
		r.f.Store(nil)
		return
	}
	r.f.Store(&refuse)
}

// Refused reports whether m is to be refused.
func (r *Refusals) Refused(m outbox.Message) bool {
	f := r.f.Load()
	return f != nil && (*f)(m)
}

// CheckDelivered fails t unless got — what an independent consumer read from the
// broker, each aggregate's messages in the order the broker holds them — holds every
// message of want (in write order) and nothing else: every id at least once (exactly
// once when exactlyOnce is set), each intact in the fields [Harness.Received]
// compares, and the first delivery of each aggregate's messages in want's order.
func CheckDelivered(t testing.TB, want, got []outbox.Message, exactlyOnce bool) {
	t.Helper()
	sent := make(map[uuid.UUID]int, len(want))
	for i, m := range want {
		sent[m.ID] = i
	}
	count := make(map[uuid.UUID]int, len(got))
	last := make(map[aggregate]int)
	var problems []string
	for _, m := range got {
		i, ok := sent[m.ID]
		if !ok {
			problems = append(problems, fmt.Sprintf("the broker holds event %s (%s/%s), which was never written", m.ID, m.AggregateType, m.AggregateID))
			continue
		}
		if count[m.ID]++; count[m.ID] > 1 {
			if exactlyOnce {
				problems = append(problems, fmt.Sprintf("event %s arrived %d times", m.ID, count[m.ID]))
			}
			continue
		}
		for _, d := range diff(want[i], m, Features{}) {
			problems = append(problems, fmt.Sprintf("event %s arrived changed: %s", m.ID, d))
		}
		k := aggregateOf(m)
		if prev, ok := last[k]; ok && i < prev {
			problems = append(problems, fmt.Sprintf("aggregate %s: event %d of the writes first arrived after event %d", k, i, prev))
		}
		last[k] = i
	}
	for _, m := range want {
		if count[m.ID] == 0 {
			problems = append(problems, fmt.Sprintf("event %s (%s/%s) never arrived", m.ID, m.AggregateType, m.AggregateID))
		}
	}
	for i, p := range problems {
		if i == maxReported {
			t.Errorf("… and %d more like these", len(problems)-i)
			break
		}
		t.Error(p)
	}
}

// Stoppable is a proxy between a sink and its broker that a test can stop (dropping
// the connections it holds) and start again on the same address, such as a
// toxiproxy Proxy.
type Stoppable interface {
	Start() error
	Stop()
}

// ProxySetDown returns a [Harness.SetDown] (and [RelayHarness.SetDown]) that stops p
// when the broker is to be down and starts it again when it is to be up.
func ProxySetDown(t testing.TB, p Stoppable) func(down bool) {
	return func(down bool) {
		if down {
			p.Stop()
			return
		}
		if err := p.Start(); err != nil {
			t.Errorf("restart the proxy: %v", err)
		}
	}
}
