package amqpsink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/sinktest"
)

const (
	published = `SELECT count(*) FROM outbox.events WHERE published_at IS NOT NULL`
	touched   = `SELECT count(*) FROM outbox.events WHERE published_at IS NULL AND (attempts > 0 OR dead_at IS NOT NULL OR last_error IS NOT NULL)`
)

// 1,000 events over 50 aggregates go through the relay to RabbitMQ and come back,
// read by a plain amqp091-go client, once each, intact, in order per aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order.#")
	sink := newSink(t, brokerURL(brokerAddr), tp.exchange, nil)
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "e2e", 50, 20)
	runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want), published)
	got, ids, err := tp.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, want, got, true)
	for i, m := range got {
		if ids[i] != m.ID.String() {
			t.Fatalf("message %s has message-id %q", m.ID, ids[i])
		}
	}
}

// With the broker out of reach (a proxy stopped in between), the backlog grows and no
// event has an attempt counted or goes dead; once the proxy is back, the sink
// reconnects and everything arrives, at least once, in order of first delivery.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order.#")
	p := newProxy(t, brokerAddr)
	sink := newSink(t, brokerURL(p.Listen), tp.exchange, nil)
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "before", 10, 10)
	r := runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want), published)

	p.Stop()
	more := writeEvents(t, pool, "during", 20, 10)
	waitFor(t, 30*time.Second, "the breaker to open", func() bool { return r.Stats().BreakerOpens > 0 })
	time.Sleep(2 * time.Second) //nolint:forbidigo // the outage's length is the test's input
	if n := count(t, pool, published); n != len(want) {
		t.Fatalf("%d events published while the broker was out of reach, want %d", n, len(want))
	}
	if n := count(t, pool, touched); n != 0 {
		t.Fatalf("%d events had an attempt counted or went dead during the outage", n)
	}

	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	waitCount(t, pool, time.Minute, len(want), published)
	got, _, err := tp.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, want, got, false)
}

// An event whose routing key no queue takes comes back (mandatory): it is dead at
// once with a readable reason, not counted published; the other aggregates flow.
func TestRelayUnroutableIsDead(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order.#")
	sink := newSink(t, brokerURL(brokerAddr), tp.exchange, nil)
	pool := pgtest.Pool(t)
	want := writeEvents(t, pool, "ok", 10, 5)
	if _, err := pool.Exec(t.Context(), `UPDATE outbox.events SET topic = 'nowhere.orders' WHERE aggregate_id = 'ok-3' AND aggregate_version = 2`); err != nil {
		t.Fatal(err)
	}
	runRelay(t, pool, sink, fastConfig())
	waitCount(t, pool, time.Minute, len(want)-4, published) // ok-3's versions 2 to 5 are held
	var lastError string
	var attempts int
	if err := pool.QueryRow(t.Context(), `SELECT last_error, attempts FROM outbox.events WHERE dead_at IS NOT NULL`).Scan(&lastError, &attempts); err != nil {
		t.Fatalf("the dead event: %v", err)
	}
	if attempts != 1 || !strings.Contains(lastError, `unroutable`) || !strings.Contains(lastError, `"nowhere.orders"`) || !strings.Contains(lastError, "NO_ROUTE") {
		t.Fatalf("dead after %d attempts with last_error %q, want 1 attempt and an unroutable reason naming the key", attempts, lastError)
	}
	var delivered []outbox.Message
	for _, m := range want {
		if m.AggregateID != "ok-3" || m.AggregateVersion < 2 {
			delivered = append(delivered, m)
		}
	}
	got, _, err := tp.read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sinktest.CheckDelivered(t, delivered, got, true)
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
	waitFor(t, 10*time.Second, "the broker to hold the first wave", func() bool { return queued(t, tp) >= 10 })
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
	waitFor(t, 30*time.Second, "the republish to be confirmed", func() bool {
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
