package outboxtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// recorder is a testing.TB that records failures instead of failing the real test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestAssertions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	err = outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
		AggregateType: "order", AggregateID: "7", EventType: "order.paid",
		Payload: []byte(`{"amount": 12}`), Headers: map[string]string{"tenant": "acme"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Inside the open transaction the event is visible.
	got := outboxtest.AssertEnqueued(t, tx, outboxtest.Match{AggregateType: "order", EventType: "order.paid"})
	if got.AggregateID != "7" || got.Headers["tenant"] != "acme" || string(got.Payload) != `{"amount": 12}` {
		t.Fatalf("got %+v", got)
	}
	outboxtest.AssertNotEnqueued(t, tx, outboxtest.Match{EventType: "order.cancelled"})

	// The assertions fail when they should.
	r := &recorder{TB: t}
	outboxtest.AssertEnqueued(r, tx, outboxtest.Match{EventType: "order.cancelled"})
	if !strings.Contains(r.failed, "0 events match") {
		t.Fatalf("AssertEnqueued on no match reported %q", r.failed)
	}
	r = &recorder{TB: t}
	outboxtest.AssertNotEnqueued(r, tx, outboxtest.Match{AggregateID: "7"})
	if !strings.Contains(r.failed, "1 events match") {
		t.Fatalf("AssertNotEnqueued on a match reported %q", r.failed)
	}
	// Outside the transaction nothing is visible yet.
	outboxtest.AssertNotEnqueued(t, pool, outboxtest.Match{})
}
