package sinktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
)

// errNoResult stands in for a result Publish did not return.
var errNoResult = errors.New("no result from Publish for this message")

const (
	// readTimeout bounds each call to Harness.Received.
	readTimeout = time.Minute
	// promptly is how soon Publish must return when its ctx is already cancelled.
	promptly = 5 * time.Second
	// maxReported is how many problems one check reports before it summarises.
	maxReported = 10
)

// suite is the state of one subtest: its harness and every message it published.
type suite struct {
	t *testing.T
	h Harness
	f Features

	mu   sync.Mutex
	sent map[uuid.UUID]outbox.Message
}

func newSuite(t *testing.T, h Harness, f Features) *suite {
	return &suite{t: t, h: h, f: f, sent: make(map[uuid.UUID]outbox.Message)}
}

// publish calls Publish and checks the shape of its answer.
func (s *suite) publish(ctx context.Context, msgs []outbox.Message) []error {
	s.t.Helper()
	before := s.record(msgs)
	return s.checkShape(msgs, before, s.h.Sink.Publish(ctx, msgs))
}

// publishPromptly is publish for a ctx that is already done: Publish must return
// within promptly.
func (s *suite) publishPromptly(ctx context.Context, msgs []outbox.Message) []error {
	s.t.Helper()
	return s.publishWithin(ctx, msgs, promptly, "its ctx was cancelled")
}

// publishWithin is publish that fails the test when Publish has not returned within
// d; why says what should have made it return.
func (s *suite) publishWithin(ctx context.Context, msgs []outbox.Message, d time.Duration, why string) []error {
	s.t.Helper()
	before := s.record(msgs)
	done := make(chan []error, 1)
	go func() { done <- s.h.Sink.Publish(ctx, msgs) }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case errs := <-done:
		return s.checkShape(msgs, before, errs)
	case <-timer.C:
		s.t.Fatalf("Publish did not return within %v, though %s", d, why)
		return nil
	}
}

// publishUntilAcked publishes msgs, then again those not acked (in their order), as
// the relay retries, until every one is acked; it fails the test when that takes
// longer than d.
func (s *suite) publishUntilAcked(ctx context.Context, msgs []outbox.Message, d time.Duration) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	pending := msgs
	var last []error
	for tries := 1; ; tries++ {
		errs := s.publish(ctx, pending)
		var next []outbox.Message
		last = last[:0]
		for i, err := range errs {
			if err != nil {
				next = append(next, pending[i])
				last = append(last, err)
			}
		}
		if pending = again(next); len(pending) == 0 {
			return
		}
		timer := time.NewTimer(retryEvery)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			s.t.Fatalf("after the broker came back, %d of %d messages still failed after %d tries in %v; the first error: %v",
				len(pending), len(msgs), tries, d, last[0])
		}
	}
}

// record notes msgs as published and returns their ids in order.
func (s *suite) record(msgs []outbox.Message) []uuid.UUID {
	before := make([]uuid.UUID, len(msgs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		before[i] = m.ID
		s.sent[m.ID] = m
	}
	return before
}

// checkShape checks Publish's answer: one result per message (a missing one counts
// as a failure, so nothing unanswered passes for acked), and msgs left as they were.
func (s *suite) checkShape(msgs []outbox.Message, before []uuid.UUID, errs []error) []error {
	s.t.Helper()
	if len(errs) != len(msgs) {
		s.t.Errorf("Publish returned %d results for %d messages", len(errs), len(msgs))
		fixed := make([]error, len(msgs))
		for i := range fixed {
			fixed[i] = errNoResult
			if i < len(errs) {
				fixed[i] = errs[i]
			}
		}
		errs = fixed
	}
	for i, m := range msgs {
		if m.ID != before[i] {
			s.t.Errorf("Publish changed the caller's msgs: index %d holds %s, was %s", i, m.ID, before[i])
			break
		}
	}
	return errs
}

// received reads the broker back and checks every message it holds against what was
// published: none unknown, every compared field intact.
func (s *suite) received() []outbox.Message {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), readTimeout)
	defer cancel()
	got, err := s.h.Received(ctx)
	if err != nil {
		s.t.Fatalf("Received: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var problems []string
	for _, m := range got {
		want, ok := s.sent[m.ID]
		if !ok {
			problems = append(problems, fmt.Sprintf("broker holds message %s (%s/%s), which was never published", m.ID, m.AggregateType, m.AggregateID))
			continue
		}
		for _, d := range diff(want, m, s.f) {
			problems = append(problems, fmt.Sprintf("message %s arrived changed: %s", m.ID, d))
		}
	}
	s.report(problems)
	return got
}

// checkAcked fails for every message Publish acked that the broker does not hold.
func (s *suite) checkAcked(msgs []outbox.Message, errs []error, got []outbox.Message) {
	s.t.Helper()
	held := ids(got)
	var problems []string
	for i, m := range msgs {
		if errs[i] == nil && !held[m.ID] {
			problems = append(problems, fmt.Sprintf("message %d (%s) was acked, but the broker does not hold it", i, m.ID))
		}
	}
	s.report(problems)
}

// checkAllOK fails for every message that failed on a healthy broker.
func (s *suite) checkAllOK(msgs []outbox.Message, errs []error) {
	s.t.Helper()
	var problems []string
	for i, m := range msgs {
		if err := errs[i]; err != nil {
			problems = append(problems, fmt.Sprintf("message %d (%s) failed on a healthy broker: %v", i, aggregateOf(m), err))
		}
	}
	s.report(problems)
}

// checkOrder fails when the broker holds an aggregate's messages out of write order.
// A message the broker holds twice (at-least-once) counts where it first arrived.
func (s *suite) checkOrder(got []outbox.Message) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	last := make(map[aggregate]outbox.Message)
	seen := make(map[uuid.UUID]bool)
	var problems []string
	for _, m := range got {
		want, ok := s.sent[m.ID]
		if !ok || seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		k := aggregateOf(want)
		if prev, ok := last[k]; ok && want.Seq < prev.Seq {
			problems = append(problems, fmt.Sprintf("aggregate %s: message seq %d arrived after seq %d", k, want.Seq, prev.Seq))
		}
		last[k] = want
	}
	s.report(problems)
}

// checkNotHeld fails for every message of msgs that the broker holds.
func (s *suite) checkNotHeld(msgs []outbox.Message, got []outbox.Message, why string) {
	s.t.Helper()
	held := ids(got)
	var problems []string
	for _, m := range msgs {
		if held[m.ID] {
			problems = append(problems, fmt.Sprintf("message seq %d of %s reached the broker, but %s", m.Seq, aggregateOf(m), why))
		}
	}
	s.report(problems)
}

// report fails the test with each problem, the first maxReported of them in full.
func (s *suite) report(problems []string) {
	s.t.Helper()
	for i, p := range problems {
		if i == maxReported {
			s.t.Errorf("… and %d more like these", len(problems)-i)
			return
		}
		s.t.Error(p)
	}
}

// diff lists how got differs from want in the fields a broker must carry.
func diff(want, got outbox.Message, f Features) []string {
	var d []string
	field := func(name string, w, g any) {
		if w != g {
			d = append(d, fmt.Sprintf("%s: sent %#v, received %#v", name, w, g))
		}
	}
	field("AggregateType", want.AggregateType, got.AggregateType)
	field("AggregateID", want.AggregateID, got.AggregateID)
	field("AggregateVersion", want.AggregateVersion, got.AggregateVersion)
	field("EventType", want.EventType, got.EventType)
	field("SchemaVersion", want.SchemaVersion, got.SchemaVersion)
	field("ContentType", want.ContentType, got.ContentType)
	field("TraceParent", want.TraceParent, got.TraceParent)
	if !f.NoHeaders {
		for name, value := range want.Headers {
			g, ok := got.Headers[name]
			switch {
			case !ok:
				d = append(d, fmt.Sprintf("Headers[%s]: sent %q, missing", name, value))
			case g != value:
				d = append(d, fmt.Sprintf("Headers[%s]: sent %q, received %q", name, value, g))
			}
		}
	}
	if !samePayload(want, got, f) {
		d = append(d, fmt.Sprintf("Payload: sent %d bytes %s, received %d bytes %s",
			len(want.Payload), preview(want.Payload), len(got.Payload), preview(got.Payload)))
	}
	return d
}

func samePayload(want, got outbox.Message, f Features) bool {
	if f.ReformatsJSON && isJSON(want.ContentType) {
		var w, g any
		if json.Unmarshal(want.Payload, &w) == nil && json.Unmarshal(got.Payload, &g) == nil {
			return reflect.DeepEqual(w, g)
		}
	}
	return bytes.Equal(want.Payload, got.Payload)
}

// isJSON reports whether ct is a JSON content type, as Enqueue decides it.
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == outbox.ContentTypeJSON || strings.HasSuffix(mt, "+json")
}

func preview(b []byte) string {
	const n = 16
	if len(b) > n {
		return fmt.Sprintf("%q…", b[:n])
	}
	return fmt.Sprintf("%q", b)
}

func ids(msgs []outbox.Message) map[uuid.UUID]bool {
	set := make(map[uuid.UUID]bool, len(msgs))
	for _, m := range msgs {
		set[m.ID] = true
	}
	return set
}

// aggregate is the key of per-aggregate order.
type aggregate struct{ typ, id string }

func aggregateOf(m outbox.Message) aggregate { return aggregate{m.AggregateType, m.AggregateID} }

func (a aggregate) String() string { return a.typ + "/" + a.id }
