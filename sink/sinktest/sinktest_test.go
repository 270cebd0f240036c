package sinktest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/memsink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

var (
	errRefused  = errors.New("refused by the test")
	errTooLarge = errors.New("payload too large")
)

// maxPayload is Features.MaxPayloadBytes in these tests.
const maxPayload = 1000

// harness runs sink over a memsink broker that refuses the messages the suite asks it
// to refuse and, when limit is set, permanently refuses payloads over limit bytes. The
// broker's message id is the header idHeader, which an [idSink] sets.
func harness(broker *memsink.Sink, sink outbox.Sink, limit int) sinktest.Harness {
	var refuse func(outbox.Message) bool
	broker.FailFunc = func(m outbox.Message) error {
		if limit > 0 && len(m.Payload) > limit {
			return outbox.Permanent(errTooLarge)
		}
		if refuse != nil && refuse(m) {
			return errRefused
		}
		return nil
	}
	return sinktest.Harness{
		Sink:          sink,
		Received:      func(context.Context) ([]outbox.Message, error) { return broker.Messages(), nil },
		FailWhen:      func(f func(outbox.Message) bool) { refuse = f },
		SetDown:       broker.SetDown,
		OutageTimeout: 2 * time.Second,
		MessageIDs: func(context.Context) ([]string, error) {
			var ids []string
			for _, m := range broker.Messages() {
				ids = append(ids, m.Headers[idHeader])
			}
			return ids, nil
		},
	}
}

// idHeader stands for the broker's message id field in these tests.
const idHeader = "message-id"

// idSink is a correct sink over a memsink broker: it sends each event id as the
// broker's message id, and refuses (permanently) an event whose own headers would
// take that field.
type idSink struct{ broker *memsink.Sink }

func (s idSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	var send []outbox.Message
	var at []int
	for i, m := range msgs {
		if _, taken := m.Headers[idHeader]; taken {
			errs[i] = outbox.Permanent(errors.New("header message-id is reserved"))
			continue
		}
		m.Headers = maps.Clone(m.Headers)
		if m.Headers == nil {
			m.Headers = make(map[string]string)
		}
		m.Headers[idHeader] = m.ID.String()
		send, at = append(send, m), append(at, i)
	}
	for j, err := range s.broker.Publish(ctx, send) {
		errs[at[j]] = err
	}
	return errs
}

// A sink that keeps the contract passes every check, PayloadTooLarge included.
func TestCorrectSinkPasses(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(*testing.T) sinktest.Harness {
		broker := &memsink.Sink{}
		return harness(broker, idSink{broker}, maxPayload)
	}, sinktest.Features{MaxPayloadBytes: maxPayload})
}

// With LargestPayloadBytes, a broker that refuses payloads over it passes every check
// (Payloads sends none larger; PayloadTooLarge is skipped).
func TestLargestPayloadBytes(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, func(*testing.T) sinktest.Harness {
		broker := &memsink.Sink{}
		return harness(broker, idSink{broker}, maxPayload)
	}, sinktest.Features{LargestPayloadBytes: maxPayload})
}

// brokenSink publishes to a memsink broker through an idSink, breaking the contract
// in one way.
type brokenSink struct {
	broker  idSink
	raw     *memsink.Sink // the broker itself, without the idSink
	publish publishFunc
	calls   int // racy: written without a lock

	mu        sync.Mutex
	sawOutage bool
}

type publishFunc func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error

func (b *brokenSink) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return b.publish(b, ctx, msgs)
}

// each changes every message on its way to the broker.
func each(change func(*outbox.Message)) publishFunc {
	return func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
		changed := slices.Clone(msgs)
		for i := range changed {
			change(&changed[i])
		}
		return b.broker.Publish(ctx, changed)
	}
}

// oneByOne publishes each message in a call of its own, so the broker never learns
// that an earlier message of the aggregate failed; stopAfterFailure then reports the
// later ones as unsent anyway.
func oneByOne(stopAfterFailure bool) publishFunc {
	return func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
		errs := make([]error, len(msgs))
		failed := make(map[string]bool)
		for i, m := range msgs {
			agg := m.AggregateType + "/" + m.AggregateID
			errs[i] = b.broker.Publish(ctx, []outbox.Message{m})[0]
			if stopAfterFailure && failed[agg] {
				errs[i] = outbox.ErrNotSent
			}
			failed[agg] = failed[agg] || errs[i] != nil
		}
		return errs
	}
}

// broken is a way to break the contract, and the checks that must catch it.
type broken struct {
	name     string
	catchers []string // the subtests that must fail
	noLimit  bool     // the broker takes payloads over maxPayload
	publish  publishFunc
}

// onOutage calls publish, and change for each message the broker reported down.
func onOutage(change func(b *brokenSink, ctx context.Context, err error) error) publishFunc {
	return func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
		errs := b.broker.Publish(ctx, msgs)
		for i, err := range errs {
			if outbox.IsUnavailable(err) {
				errs[i] = change(b, ctx, err)
			}
		}
		return errs
	}
}

var brokenSinks = []broken{
	{
		name: "drops the last result", catchers: []string{"Results", "Order", "Fields"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			errs := b.broker.Publish(ctx, msgs)
			return errs[:max(0, len(errs)-1)]
		},
	},
	{
		name: "acks messages it did not send", catchers: []string{"Results", "Order"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			var sent []outbox.Message
			for i, m := range msgs {
				if i%3 != 2 {
					sent = append(sent, m)
				}
			}
			b.broker.Publish(ctx, sent)
			return make([]error, len(msgs))
		},
	},
	{
		name: "sorts the caller's msgs", catchers: []string{"Results"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			slices.SortStableFunc(msgs, func(x, y outbox.Message) int {
				return strings.Compare(x.AggregateType+x.AggregateID, y.AggregateType+y.AggregateID)
			})
			return b.broker.Publish(ctx, msgs)
		},
	},
	{
		name: "publishes in reverse", catchers: []string{"Order", "Concurrent"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			reversed := slices.Clone(msgs)
			slices.Reverse(reversed)
			errs := b.broker.Publish(ctx, reversed)
			slices.Reverse(errs)
			return errs
		},
	},
	{name: "drops headers", catchers: []string{"Fields"}, publish: each(func(m *outbox.Message) { m.Headers = nil })},
	{name: "drops the traceparent", catchers: []string{"Fields"}, publish: each(func(m *outbox.Message) { m.TraceParent = "" })},
	{
		name: "carries the version as a float64", catchers: []string{"Fields"},
		publish: each(func(m *outbox.Message) { m.AggregateVersion = int64(float64(m.AggregateVersion)) }),
	},
	{
		name: "treats payloads as text", catchers: []string{"Payloads"},
		publish: each(func(m *outbox.Message) {
			if m.Payload != nil {
				m.Payload = []byte(strings.ToValidUTF8(string(m.Payload), "?"))
			}
		}),
	},
	{
		name: "answers an empty batch", catchers: []string{"EmptyBatch"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			if len(msgs) == 0 {
				return []error{nil}
			}
			return b.broker.Publish(ctx, msgs)
		},
	},
	{
		name: "ignores ctx", catchers: []string{"CancelledContext"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			return b.broker.Publish(context.WithoutCancel(ctx), msgs)
		},
	},
	{
		name: "blocks on a cancelled ctx", catchers: []string{"CancelledContext"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			if ctx.Err() != nil {
				<-time.After(time.Minute)
			}
			return b.broker.Publish(ctx, msgs)
		},
	},
	{name: "sends each message on its own", catchers: []string{"FailureStopsAggregate", "FailureMidBatch"}, publish: oneByOne(false)},
	{name: "sends past a refusal but reports it unsent", catchers: []string{"FailureStopsAggregate", "FailureMidBatch"}, publish: oneByOne(true)},
	{
		name: "leaves the message id to the broker", catchers: []string{"MessageIDs"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			return b.raw.Publish(ctx, msgs)
		},
	},
	{
		name: "lets a header pose as the event id", catchers: []string{"HeaderValues"},
		publish: each(func(m *outbox.Message) {
			if id, err := uuid.Parse(m.Headers["id"]); err == nil {
				m.ID = id
			}
		}),
	},
	{
		name: "reports a bad header as transient", catchers: []string{"HeaderValues"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			for _, m := range msgs {
				for _, v := range m.Headers {
					if strings.ContainsAny(v, "\r\n\x00") {
						return slices.Repeat([]error{errors.New("bad header, try again")}, len(msgs))
					}
				}
			}
			return b.broker.Publish(ctx, msgs)
		},
	},
	{
		name: "reports an outage as a transient error", catchers: []string{"Outage"},
		publish: onOutage(func(_ *brokenSink, _ context.Context, err error) error {
			return errors.New(strings.TrimPrefix(err.Error(), "sink unavailable: "))
		}),
	},
	{
		name: "acks during an outage", catchers: []string{"Outage"},
		publish: onOutage(func(*brokenSink, context.Context, error) error { return nil }),
	},
	{
		name: "waits an outage out", catchers: []string{"Outage"},
		publish: onOutage(func(_ *brokenSink, ctx context.Context, _ error) error {
			<-ctx.Done()
			return ctx.Err()
		}),
	},
	{
		name: "never recovers from an outage", catchers: []string{"Outage"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			b.mu.Lock()
			saw := b.sawOutage
			b.mu.Unlock()
			if saw {
				return slices.Repeat([]error{outbox.Unavailable(memsink.ErrDown)}, len(msgs))
			}
			errs := b.broker.Publish(ctx, msgs)
			if slices.ContainsFunc(errs, outbox.IsUnavailable) {
				b.mu.Lock()
				b.sawOutage = true
				b.mu.Unlock()
			}
			return errs
		},
	},
	{
		name: "reports a refusal as unavailable", catchers: []string{"FailureStopsAggregate", "ResultsLineUp"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			errs := b.broker.Publish(ctx, msgs)
			for i, err := range errs {
				if err != nil && !errors.Is(err, outbox.ErrNotSent) {
					errs[i] = outbox.Unavailable(err)
				}
			}
			return errs
		},
	},
	{
		name: "returns results in reverse", catchers: []string{"ResultsLineUp"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			errs := b.broker.Publish(ctx, msgs)
			slices.Reverse(errs)
			return errs
		},
	},
	{
		name: "sends payloads over the limit", catchers: []string{"PayloadTooLarge"}, noLimit: true,
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			return b.broker.Publish(ctx, msgs)
		},
	},
	{
		name: "has a data race", catchers: []string{"Concurrent"},
		publish: func(b *brokenSink, ctx context.Context, msgs []outbox.Message) []error {
			b.calls++
			return b.broker.Publish(ctx, msgs)
		},
	},
}

const brokenEnv = "SINKTEST_BROKEN_SINK"

// TestBrokenSink runs the suite against the broken sink named by $SINKTEST_BROKEN_SINK.
// It must fail, so TestBrokenSinksAreCaught runs it in a child process.
func TestBrokenSink(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("run by TestBrokenSinksAreCaught")
	}
	i := slices.IndexFunc(brokenSinks, func(b broken) bool { return b.name == name })
	if i < 0 {
		t.Fatalf("no broken sink %q", name)
	}
	b := brokenSinks[i]
	sinktest.Run(t, func(*testing.T) sinktest.Harness {
		broker := &memsink.Sink{}
		limit := maxPayload
		if b.noLimit {
			limit = 0
		}
		return harness(broker, &brokenSink{broker: idSink{broker}, raw: broker, publish: b.publish}, limit)
	}, sinktest.Features{MaxPayloadBytes: maxPayload})
}

// Every check fails for a sink that breaks the contract in the way it checks.
func TestBrokenSinksAreCaught(t *testing.T) {
	t.Parallel()
	if os.Getenv(brokenEnv) != "" {
		t.Skip("in the child process")
	}
	for _, b := range brokenSinks {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			if b.name == "has a data race" && !raceEnabled {
				t.Skip("needs -race")
			}
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenSink$", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+b.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a sink that %s:\n%s", b.name, out)
			}
			for _, c := range b.catchers {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenSink/"+c+" ") {
					t.Errorf("check %s passed a sink that %s", c, b.name)
				}
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}

// Every check has a broken sink it must catch.
func TestEveryCheckCatchesABrokenSink(t *testing.T) {
	t.Parallel()
	caught := make(map[string]bool)
	for _, b := range brokenSinks {
		for _, c := range b.catchers {
			caught[c] = true
		}
	}
	for _, c := range []string{
		"Results", "Order", "Fields", "Payloads", "EmptyBatch", "CancelledContext",
		"FailureStopsAggregate", "ResultsLineUp", "PayloadTooLarge", "FailureMidBatch", "HeaderValues",
		"MessageIDs", "Outage", "Concurrent",
	} {
		if !caught[c] {
			t.Errorf("no broken sink is expected to fail check %s", c)
		}
	}
}

func delivered(ids ...uuid.UUID) []outbox.Message {
	msgs := make([]outbox.Message, len(ids))
	for i, id := range ids {
		msgs[i] = outbox.Message{ID: id, AggregateType: "order", AggregateID: "o-1", SchemaVersion: 1}
	}
	return msgs
}

// CheckDelivered passes what arrived whole and in order, and fails each way it can
// go wrong.
func TestCheckDelivered(t *testing.T) {
	t.Parallel()
	a, b, c := outbox.NewID(), outbox.NewID(), outbox.NewID()
	want := delivered(a, b, c)
	changed := delivered(a, b, c)
	changed[1].Payload = []byte("x")
	for _, tc := range []struct {
		name        string
		got         []outbox.Message
		exactlyOnce bool
		fails       bool
	}{
		{"whole", delivered(a, b, c), true, false},
		{"a duplicate, at least once", delivered(a, b, a, c), false, false},
		{"a duplicate, exactly once", delivered(a, b, a, c), true, true},
		{"one missing", delivered(a, c), false, true},
		{"out of order", delivered(b, a, c), false, true},
		{"an unknown one", delivered(a, b, c, outbox.NewID()), false, true},
		{"one changed", changed, false, true},
	} {
		rec := &recorder{TB: t}
		sinktest.CheckDelivered(rec, want, tc.got, tc.exactlyOnce)
		if rec.failed != tc.fails {
			t.Errorf("%s: failed = %v, want %v (%v)", tc.name, rec.failed, tc.fails, rec.msgs)
		}
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed bool
	msgs   []string
}

func (r *recorder) Helper() {}
func (r *recorder) Error(args ...any) {
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprint(args...))
}

func (r *recorder) Errorf(format string, args ...any) { r.Error(fmt.Sprintf(format, args...)) }

// Reroute changes only the Topic of the sink's copies.
func TestReroute(t *testing.T) {
	t.Parallel()
	broker := &memsink.Sink{}
	var refusals sinktest.Refusals
	sink := sinktest.Reroute(broker, func(m outbox.Message) string {
		if refusals.Refused(m) {
			return "refused"
		}
		return "p." + m.Topic
	})
	msgs := delivered(outbox.NewID(), outbox.NewID())
	refusals.Set(func(m outbox.Message) bool { return m.ID == msgs[1].ID })
	sink.Publish(t.Context(), msgs)
	got := broker.Messages()
	if got[0].Topic != "p." || got[1].Topic != "refused" || msgs[0].Topic != "" || got[0].ID != msgs[0].ID {
		t.Fatalf("rerouted %+v from %+v", got, msgs)
	}
}
