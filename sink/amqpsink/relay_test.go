package amqpsink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// reader reads the topology's queue with a plain amqp091-go client.
func reader(tp topology) func(context.Context) ([]outbox.Message, error) {
	return func(ctx context.Context) ([]outbox.Message, error) {
		msgs, ids, err := tp.read(ctx)
		for i, m := range msgs {
			if err == nil && ids[i] != m.ID.String() {
				err = fmt.Errorf("message %s has message-id %q", m.ID, ids[i])
			}
		}
		return msgs, err
	}
}

// 1,000 events over 50 aggregates go through the relay to RabbitMQ and come back,
// read by a plain amqp091-go client, once each, intact, with the event id as
// message-id, in order per aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order.#")
	sink := newSink(t, brokerURL(brokerAddr), tp.exchange, nil)
	sinktest.RelayDelivers(t, relayHarness(t, sink, reader(tp), nil))
}

// With the broker out of reach (a proxy stopped in between), the backlog grows and no
// event has an attempt counted or goes dead; once the proxy is back, the sink
// reconnects and everything arrives, at least once, in order of first delivery.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order.#")
	p := newProxy(t, brokerAddr)
	sink := newSink(t, brokerURL(p.Listen), tp.exchange, nil)
	sinktest.RelayOutage(t, relayHarness(t, sink, reader(tp), proxySetDown(t, p)))
}

// An event whose routing key no queue takes comes back (mandatory): it is dead at
// once with a readable reason, not counted published; the other aggregates flow.
func TestRelayUnroutableIsDead(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order.#")
	sink := newSink(t, brokerURL(brokerAddr), tp.exchange, nil)
	sinktest.RelayRejects(t, relayHarness(t, sink, reader(tp), nil),
		func(e *outbox.Event) { e.Topic = "nowhere.orders" }, "unroutable", `"nowhere.orders"`, "NO_ROUTE")
}

// queued returns how many messages the queue holds.
func queued(t *testing.T, tp topology) int {
	t.Helper()
	ch, err := tp.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(tp.queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// The connection drops while confirms are outstanding (the broker holds the
// messages; its acks are delayed on the way back): every unconfirmed message fails as
// unavailable, none as acked. The sink reconnects — through resets while it reopens
// its connection and channel — and the republish delivers everything: duplicates
// allowed, nothing lost, every confirm matched to its own message on the new channel.
func TestConnectionDropWithConfirmsOutstanding(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order.#")
	p := newProxy(t, brokerAddr)
	sink := newSink(t, brokerURL(p.Listen), tp.exchange, nil)
	var msgs []outbox.Message
	for i := range 50 {
		msgs = append(msgs, outbox.Message{
			ID: outbox.NewID(), AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i%10), AggregateVersion: int64(i/10 + 1),
			EventType: "order.paid", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: fmt.Appendf(nil, `{"i": %d}`, i), Attempt: 1,
		})
	}
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(`{"name": "slow-acks", "type": "latency", "stream": "downstream", "attributes": {"latency": 3000}}`)); err != nil {
		t.Fatal(err)
	}
	done := make(chan []error, 1)
	go func() { done <- sink.Publish(context.Background(), msgs) }()
	sinktest.WaitFor(t, 10*time.Second, "the broker to hold the first wave", func() bool { return queued(t, tp) >= 10 })
	p.Stop()
	errs := <-done
	for i, err := range errs {
		if !outbox.IsUnavailable(err) {
			t.Errorf("message %d with its confirm outstanding when the connection dropped: %v, want unavailable", i, err)
		}
	}
	if err := p.Toxics.RemoveToxic(t.Context(), "slow-acks"); err != nil {
		t.Fatal(err)
	}
	// Resets while the sink reconnects and reopens its channel.
	for range 3 {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		p.Stop()
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	pending := msgs
	sinktest.WaitFor(t, 30*time.Second, "the republish to be confirmed", func() bool {
		var next []outbox.Message
		for i, err := range sink.Publish(t.Context(), pending) {
			if err != nil {
				if !outbox.IsUnavailable(err) && !errors.Is(err, outbox.ErrNotSent) {
					t.Fatalf("republish of message %d: %v, want success or unavailable while reconnecting", i, err)
				}
				next = append(next, pending[i])
			}
		}
		pending = next
		return len(pending) == 0
	})
	got, ids, err := tp.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, msgs, got, false)
	if len(got) <= len(msgs) {
		t.Fatalf("the broker holds %d messages for %d events: the first wave reached it before the drop, so its republish must be a duplicate", len(got), len(msgs))
	}
	for i, m := range got {
		if ids[i] != m.ID.String() {
			t.Fatalf("message %s has message-id %q", m.ID, ids[i])
		}
	}
}
