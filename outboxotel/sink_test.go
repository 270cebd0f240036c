package outboxotel_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxotel"
)

// captureSink records the slices it was given (not copies: a test can tell whether the
// wrapper copied) and acknowledges everything.
type captureSink struct {
	mu    sync.Mutex
	calls [][]outbox.Message
}

func (c *captureSink) Publish(_ context.Context, msgs []outbox.Message) []error {
	c.mu.Lock()
	c.calls = append(c.calls, msgs)
	c.mu.Unlock()
	return make([]error, len(msgs))
}

// messages returns n messages of n aggregates; the even ones carry parent's traceparent.
func messages(n int, parent string) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{
			ID: outbox.NewID(), Seq: int64(i + 1), AggregateType: "order", AggregateID: fmt.Sprint("o-", i),
			EventType: "order.placed", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON,
			Payload: []byte(`{}`), Headers: map[string]string{"h": "v"}, CreatedAt: time.Now(), Attempt: 1,
		}
		if i%2 == 0 {
			msgs[i].TraceParent = parent
		}
	}
	return msgs
}

// TestSinkNeverModifiesMsgs: Publish calls running at once on one shared slice, with
// readers of it alongside, never write to it (the race detector sees any write; the
// slice is compared with a copy afterwards), and the sink behind gets a copy carrying
// the publish spans' traceparents.
func TestSinkNeverModifiesMsgs(t *testing.T) {
	tp, _ := recorder(t)
	pctx, parent := tp.Tracer("app").Start(context.Background(), "write")
	parent.End()
	msgs := messages(16, outboxotel.TraceParent(pctx))
	before := slices.Clone(msgs)
	next := &captureSink{}
	s := outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: tp})

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				if errs := s.Publish(context.Background(), msgs); len(errs) != len(msgs) {
					t.Errorf("%d results for %d messages", len(errs), len(msgs))
				}
			}
		})
		wg.Go(func() {
			for range 25 {
				for i := range msgs {
					_ = msgs[i].TraceParent + msgs[i].AggregateID
				}
			}
		})
	}
	wg.Wait()
	if !reflect.DeepEqual(msgs, before) {
		t.Fatal("Publish modified the caller's messages")
	}
	seen := map[string]bool{}
	for _, call := range next.calls {
		if &call[0] == &msgs[0] {
			t.Fatal("the sink behind got the caller's slice, not a copy")
		}
		for i, m := range call {
			if m.TraceParent == "" || m.TraceParent == msgs[i].TraceParent || seen[m.TraceParent] {
				t.Fatalf("message %d went on with traceparent %q (input %q): want a new one of its publish span", i, m.TraceParent, msgs[i].TraceParent)
			}
			seen[m.TraceParent] = true
			m.TraceParent = msgs[i].TraceParent
			if !reflect.DeepEqual(m, msgs[i]) {
				t.Fatalf("message %d changed beyond its traceparent: %+v", i, m)
			}
		}
	}
}

// TestSinkNoopPassesThrough: with a no-op TracerProvider the sink behind gets the
// caller's very slice, unchanged.
func TestSinkNoopPassesThrough(t *testing.T) {
	tp, _ := recorder(t)
	pctx, parent := tp.Tracer("app").Start(context.Background(), "write")
	parent.End()
	msgs := messages(4, outboxotel.TraceParent(pctx))
	next := &captureSink{}
	outboxotel.NewSink(next, &outboxotel.Config{TracerProvider: noop.NewTracerProvider()}).Publish(context.Background(), msgs)
	if len(next.calls) != 1 || &next.calls[0][0] != &msgs[0] {
		t.Fatal("a no-op tracer copied the messages")
	}
	if errs := outboxotel.NewSink(next, nil).Publish(context.Background(), nil); len(errs) != 0 {
		t.Fatalf("%d results for no messages", len(errs))
	}
}

func TestTraceParentAndContextFromMessage(t *testing.T) {
	tp, _ := recorder(t)
	if got := outboxotel.TraceParent(context.Background()); got != "" {
		t.Fatalf("TraceParent without a span: %q", got)
	}
	ctx, span := tp.Tracer("app").Start(context.Background(), "write")
	defer span.End()
	tp1 := outboxotel.TraceParent(ctx)
	want := fmt.Sprintf("00-%s-%s-01", span.SpanContext().TraceID(), span.SpanContext().SpanID())
	if tp1 != want {
		t.Fatalf("TraceParent %q, want %q", tp1, want)
	}
	got := trace.SpanContextFromContext(outboxotel.ContextFromMessage(context.Background(), outbox.Message{TraceParent: tp1}))
	if !got.IsRemote() || got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("ContextFromMessage: %+v", got)
	}
	for _, bad := range []string{"", "00-zz", "00-00000000000000000000000000000000-0000000000000000-01"} {
		base := context.Background()
		if c := outboxotel.ContextFromMessage(base, outbox.Message{TraceParent: bad}); c != base {
			t.Errorf("ContextFromMessage(%q) changed the context", bad)
		}
	}
}

// TestHandlerErrors: through inbox.Process, a handler's transient error, permanent error
// and panic each end its Consumer span with an Error status and their error.type; a span
// in ctx becomes a link when the message has a parent of its own, and the parent when it
// has none.
func TestHandlerErrors(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tp, rec := recorder(t)
	tracer := tp.Tracer("app")
	pctx, producer := tracer.Start(ctx, "write")
	producer.End()
	rctx, receive := tracer.Start(ctx, "receive", trace.WithSpanKind(trace.SpanKindConsumer))
	defer receive.End()

	cases := []struct {
		name     string
		h        inbox.Handler
		wantType string
		outcome  inbox.Outcome
		wantErr  bool
	}{
		{"ok", func(context.Context, pgx.Tx, outbox.Message) error { return nil }, "", inbox.Applied, false},
		{"transient", func(context.Context, pgx.Tx, outbox.Message) error { return errors.New("db busy") }, outboxotel.ErrorTypeTransient, 0, true},
		{"permanent", func(context.Context, pgx.Tx, outbox.Message) error { return outbox.Permanent(errors.New("bad amount")) }, outboxotel.ErrorTypePermanent, inbox.Quarantined, false},
		{"panic", func(context.Context, pgx.Tx, outbox.Message) error { panic("boom") }, "panic", inbox.Quarantined, false},
	}
	for i, c := range cases {
		m := messages(1, outboxotel.TraceParent(pctx))[0]
		m.AggregateID = fmt.Sprint("h-", i)
		res, err := inbox.Process(rctx, pool, "billing", m, outboxotel.Handler(c.h, &outboxotel.HandlerConfig{TracerProvider: tp}))
		if (err != nil) != c.wantErr || (!c.wantErr && res.Outcome != c.outcome) {
			t.Fatalf("%s: outcome %v, error %v", c.name, res.Outcome, err)
		}
		s := spansOf(rec.Ended(), "process", m.ID.String())
		if len(s) != 1 {
			t.Fatalf("%s: %d process spans", c.name, len(s))
		}
		checkChild(t, s[0], producer.SpanContext(), trace.SpanKindConsumer, true)
		if l := s[0].Links(); len(l) != 1 || l[0].SpanContext.SpanID() != receive.SpanContext().SpanID() {
			t.Errorf("%s: links %+v, want the receive span", c.name, l)
		}
		v, _ := attr(s[0], "error.type")
		if v.AsString() != c.wantType {
			t.Errorf("%s: error.type %q, want %q", c.name, v.AsString(), c.wantType)
		}
		if (s[0].Status().Code == codes.Error) != (c.wantType != "") {
			t.Errorf("%s: status %+v", c.name, s[0].Status())
		}
		if c.name == "permanent" && !strings.Contains(s[0].Status().Description, "bad amount") {
			t.Errorf("permanent: status %q lacks the error", s[0].Status().Description)
		}
	}

	// No traceparent on the message: the span in ctx is the parent.
	m := messages(1, "")[0]
	m.AggregateID = "h-none"
	if _, err := inbox.Process(rctx, pool, "billing", m, outboxotel.Handler(cases[0].h, &outboxotel.HandlerConfig{TracerProvider: tp})); err != nil {
		t.Fatal(err)
	}
	s := spansOf(rec.Ended(), "process", m.ID.String())
	if len(s) != 1 {
		t.Fatalf("%d process spans", len(s))
	}
	checkChild(t, s[0], receive.SpanContext(), trace.SpanKindConsumer, false)
	if len(s[0].Links()) != 0 {
		t.Errorf("links %+v, want none", s[0].Links())
	}
}
