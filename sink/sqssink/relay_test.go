package sqssink_test

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/sinktest"
	"github.com/outboxkit/outbox/sink/sqssink"
)

// 1,000 events over 50 aggregates go through the relay to a goaws queue and come back
// through the SDK's ReceiveMessage (a consumer's path): once each, intact, and sent in
// order per aggregate. The order checked is the queue's (goaws's store, as the relay's
// sends arrived), not the receives': a standard queue promises none, and a receive whose
// answer the SDK dropped brings its 10 messages back last (a CI run saw 10 "order
// violations" that way).
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	admin := client(goaws(t))
	queue := createGoawsQueue(t, admin, false)
	sink, err := sqssink.New(admin, &sqssink.Config{Queue: queue, Unbatched: true})
	if err != nil {
		t.Fatal(err)
	}
	read := func(ctx context.Context) ([]outbox.Message, error) {
		sent, err := goawsStored(queue)
		if err != nil {
			return nil, err
		}
		position := make(map[[16]byte]int, len(sent))
		for i, s := range sent {
			m, err := decode(s)
			if err != nil {
				return nil, err
			}
			position[m.ID] = i
		}
		received, err := receiveAll(ctx, admin, queue)
		slices.SortStableFunc(received, func(a, b outbox.Message) int { return cmp.Compare(position[a.ID], position[b.ID]) })
		return received, err
	}
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
