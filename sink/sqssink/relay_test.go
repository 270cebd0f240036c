package sqssink_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/sinktest"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// 1,000 events over 50 aggregates go through the relay to a goaws queue and come back
// through the SDK's ReceiveMessage (a consumer's path): once each, intact, in order per
// aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	admin := client(goaws(t))
	queue := createGoawsQueue(t, admin, false)
	sink, err := sqssink.New(admin, &sqssink.Config{Queue: queue, Unbatched: true})
	if err != nil {
		t.Fatal(err)
	}
	read := func(ctx context.Context) ([]outbox.Message, error) { return receiveAll(ctx, admin, queue) }
	sinktest.RelayDelivers(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, read, nil))
}

// With SQS out of reach (a proxy stopped in front of the fake) no event has an attempt
// counted or goes dead; once it is back everything arrives, in batches.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	queue := queueName(true)
	f.createQueue(queue)
	p := newProxy(t, hostOf(f.srv.URL))
	sink, err := sqssink.New(client("http://"+p.Listen), &sqssink.Config{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	read := func(context.Context) ([]outbox.Message, error) {
		m, _, err := decodeAll(fakeStored(f, queue))
		return m, err
	}
	sinktest.RelayOutage(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, read, sinktest.ProxySetDown(t, p)))
}

// An event whose entry SQS refuses in its batch is dead at once with SQS's code as its
// reason; the other aggregates flow.
func TestRelayRefusedEntryIsDead(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	queue := queueName(true)
	f.createQueue(queue)
	f.setRefuse(func(e fakeEntry) bool {
		return strings.Contains(e.MessageAttributes[sqssink.AttributeHeaders].StringValue, "x-invalid")
	})
	sink, err := sqssink.New(client(f.srv.URL), &sqssink.Config{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	read := func(context.Context) ([]outbox.Message, error) {
		m, _, err := decodeAll(fakeStored(f, queue))
		return m, err
	}
	sinktest.RelayRejects(t, sinktest.PoolRelayHarness(pgtest.Pool(t), sink, read, nil),
		func(e *outbox.Event) { e.Headers["x-invalid"] = "1" }, "InvalidMessageContents", "refused by the test")
}
