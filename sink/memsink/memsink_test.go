package memsink_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
