package memsink_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/memsink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

var errRefused = errors.New("refused by the test")

// harness makes the sink's FailFunc refuse what the suite asks it to, and SetDown take
// it down. It has no broker message id to check.
func harness(s *memsink.Sink) sinktest.Harness {
	return sinktest.Harness{
		Sink: s,
		Received: func(context.Context) ([]outbox.Message, error) {
			return s.Messages(), nil
		},
		SetDown:       s.SetDown,
		OutageTimeout: 5 * time.Second,
		FailWhen: func(refuse func(outbox.Message) bool) {
			s.FailFunc = nil
			if refuse != nil {
				s.FailFunc = func(m outbox.Message) error {
					if refuse(m) {
						return errRefused
					}
					return nil
				}
			}
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(*testing.T) sinktest.Harness {
		return harness(&memsink.Sink{})
	}, sinktest.Features{})
}

// With OnPublish set, the sink behaves the same, and the hook is told each call's
// messages and the results Publish returns: nil for the delivered ones only.
func TestConformanceWithOnPublish(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(t *testing.T) sinktest.Harness {
		s := &memsink.Sink{}
		var calls atomic.Int64
		s.OnPublish = func(msgs []outbox.Message, errs []error) {
			calls.Add(1)
			delivered := map[uuid.UUID]bool{}
			for _, m := range s.Messages() {
				delivered[m.ID] = true
			}
			if len(errs) != len(msgs) {
				t.Errorf("OnPublish: %d results for %d messages", len(errs), len(msgs))
				return
			}
			for i, m := range msgs {
				if (errs[i] == nil) != delivered[m.ID] {
					t.Errorf("OnPublish: message %s has result %v, delivered %v", m.ID, errs[i], delivered[m.ID])
				}
			}
		}
		t.Cleanup(func() {
			if s.Count() > 0 && calls.Load() == 0 {
				t.Error("messages were delivered, yet OnPublish was never called")
			}
		})
		return harness(s)
	}, sinktest.Features{})
}

func TestConformanceWithLatency(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(*testing.T) sinktest.Harness {
		return harness(&memsink.Sink{Latency: time.Microsecond})
	}, sinktest.Features{})
}

func msg(aggregateID, eventType string) outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: aggregateID, EventType: eventType,
		Payload: []byte(`{}`), ContentType: outbox.ContentTypeJSON, Attempt: 1,
	}
}

func TestDeliveriesAreNumberedAcrossReset(t *testing.T) {
	t.Parallel()
	s := &memsink.Sink{}
	ctx := t.Context()
	s.Publish(ctx, []outbox.Message{msg("o-1", "a"), msg("o-1", "b")})
	s.Reset()
	if s.Count() != 0 || len(s.Messages()) != 0 {
		t.Fatalf("after Reset: Count %d, %d messages; want 0", s.Count(), len(s.Messages()))
	}
	s.Publish(ctx, []outbox.Message{msg("o-1", "c")})
	d := s.Deliveries()
	if len(d) != 1 || d[0].N != 3 || d[0].Message.EventType != "c" || d[0].At.IsZero() {
		t.Fatalf("deliveries after Reset = %+v, want one: N 3, event c, with a time", d)
	}
}

func TestRecordsAreCopies(t *testing.T) {
	t.Parallel()
	s := &memsink.Sink{}
	m := msg("o-1", "a")
	m.Headers = map[string]string{"k": "v"}
	s.Publish(t.Context(), []outbox.Message{m})
	m.Payload[0] = 'X'
	m.Headers["k"] = "changed"
	got := s.Messages()
	got[0].Payload[0] = 'Y'
	if again := s.Messages()[0]; string(again.Payload) != "{}" || again.Headers["k"] != "v" {
		t.Fatalf("record changed through the caller's or a reader's copy: payload %q, headers %v", again.Payload, again.Headers)
	}
}

func TestDown(t *testing.T) {
	t.Parallel()
	s := &memsink.Sink{}
	s.SetDown(true)
	errs := s.Publish(t.Context(), []outbox.Message{msg("o-1", "a"), msg("o-1", "b"), msg("o-2", "a")})
	for i, err := range errs {
		if !outbox.IsUnavailable(err) || !errors.Is(err, memsink.ErrDown) {
			t.Errorf("message %d while down: %v, want Unavailable wrapping ErrDown", i, err)
		}
	}
	s.SetDown(false)
	if errs := s.Publish(t.Context(), []outbox.Message{msg("o-1", "a")}); errs[0] != nil {
		t.Fatalf("after SetDown(false): %v", errs[0])
	}
}

func TestFailFuncStopsAggregate(t *testing.T) {
	t.Parallel()
	s := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		if m.EventType == "bad" {
			return outbox.Permanent(errRefused)
		}
		return nil
	}}
	errs := s.Publish(t.Context(), []outbox.Message{msg("o-1", "ok"), msg("o-1", "bad"), msg("o-2", "ok"), msg("o-1", "ok")})
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("messages before the failure or of another aggregate failed: %v", errs)
	}
	if !outbox.IsPermanent(errs[1]) || !errors.Is(errs[1], errRefused) {
		t.Errorf("refused message: %v, want the FailFunc's permanent error", errs[1])
	}
	if !errors.Is(errs[3], outbox.ErrNotSent) {
		t.Errorf("later message of the failed aggregate: %v, want ErrNotSent", errs[3])
	}
	if s.Count() != 2 {
		t.Errorf("Count = %d, want 2", s.Count())
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	t.Parallel()
	s := &memsink.Sink{Latency: time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan []error)
	go func() { done <- s.Publish(ctx, []outbox.Message{msg("o-1", "a"), msg("o-2", "a")}) }()
	cancel()
	for i, err := range <-done {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d: %v, want context.Canceled", i, err)
		}
	}
	if s.Count() != 0 {
		t.Errorf("Count = %d, want 0", s.Count())
	}
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	s := &memsink.Sink{}
	ctx := t.Context()
	done := make(chan error)
	go func() { done <- s.WaitFor(ctx, 3) }()
	for _, id := range []string{"o-1", "o-2", "o-3"} {
		s.Publish(ctx, []outbox.Message{msg(id, "a")})
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitFor(3) after 3 deliveries: %v", err)
	}

	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := s.WaitFor(short, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor(4) with 3 deliveries: %v, want DeadlineExceeded", err)
	}
}

// OnPublish is called once per call, with the call's messages and the results Publish
// returns, after the deliveries are recorded; while it blocks, so does the call.
func TestOnPublish(t *testing.T) {
	t.Parallel()
	type call struct {
		msgs     []outbox.Message
		errs     []error
		recorded int
	}
	calls := make(chan call, 1)
	release := make(chan struct{})
	s := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		if m.EventType == "bad" {
			return errRefused
		}
		return nil
	}}
	s.OnPublish = func(msgs []outbox.Message, errs []error) {
		calls <- call{msgs, errs, s.Count()}
		<-release
	}
	msgs := []outbox.Message{msg("o-1", "ok"), msg("o-1", "bad"), msg("o-1", "ok"), msg("o-2", "ok")}
	returned := make(chan []error, 1)
	go func() { returned <- s.Publish(t.Context(), msgs) }()
	c := <-calls
	select {
	case <-returned:
		t.Fatal("Publish returned while OnPublish blocked")
	default:
	}
	close(release)
	errs := <-returned
	if len(c.msgs) != len(msgs) || c.msgs[1].ID != msgs[1].ID || c.recorded != 2 {
		t.Fatalf("OnPublish got %d messages (second %s) with %d recorded; want the call's %d, 2 recorded", len(c.msgs), c.msgs[1].ID, c.recorded, len(msgs))
	}
	for i := range errs {
		if !errors.Is(c.errs[i], errs[i]) {
			t.Errorf("message %d: OnPublish got %v, Publish returned %v", i, c.errs[i], errs[i])
		}
	}
	if errs[0] != nil || !errors.Is(errs[1], errRefused) || !errors.Is(errs[2], outbox.ErrNotSent) || errs[3] != nil {
		t.Fatalf("results %v: want nil, refused, not sent, nil", errs)
	}
}

// WaitUntil returns once its condition holds on the deliveries, looking again after
// each; when ctx ends first, it returns what it saw last and ctx's error.
func TestWaitUntil(t *testing.T) {
	t.Parallel()
	s := &memsink.Sink{}
	ctx := t.Context()
	s.Publish(ctx, []outbox.Message{msg("o-1", "a")})
	second := func(m []outbox.Message) bool { return len(m) >= 2 && m[1].AggregateID == "o-2" }
	done := make(chan []outbox.Message)
	go func() {
		msgs, err := s.WaitUntil(ctx, second)
		if err != nil {
			t.Errorf("WaitUntil: %v", err)
		}
		done <- msgs
	}()
	s.Publish(ctx, []outbox.Message{msg("o-2", "a"), msg("o-3", "a")})
	if msgs := <-done; len(msgs) < 2 || msgs[1].AggregateID != "o-2" {
		t.Fatalf("WaitUntil returned %d messages, want the condition met", len(msgs))
	}

	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	msgs, err := s.WaitUntil(short, func(m []outbox.Message) bool { return len(m) > 3 })
	if !errors.Is(err, context.DeadlineExceeded) || len(msgs) != 3 {
		t.Fatalf("WaitUntil(more than 3) with 3 deliveries: %d messages, %v; want the 3 and DeadlineExceeded", len(msgs), err)
	}
}
