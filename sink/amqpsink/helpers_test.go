package amqpsink_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// brokerAddr is the machine's RabbitMQ, which CI starts: tests fail, not skip, when it
// is down.
const brokerAddr = "127.0.0.1:5672"

func brokerURL(addr string) string { return "amqp://guest:guest@" + addr + "/" }

func TestMain(m *testing.M) { pgtest.Main(m) }

var names atomic.Int64

// topology is an exchange and a queue of unique names on the machine's broker, the
// queue bound to the exchange for routing keys matching binding; both are deleted
// when t ends.
type topology struct {
	exchange, queue string
	conn            *amqp.Connection
}

func newTopology(t *testing.T, binding string) topology {
	t.Helper()
	conn, err := amqp.Dial(brokerURL(brokerAddr))
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", brokerAddr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	n := names.Add(1)
	tp := topology{exchange: fmt.Sprintf("outbox-test-%d-%d", os.Getpid(), n), queue: fmt.Sprintf("outbox-test-%d-%d", os.Getpid(), n), conn: conn}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(tp.exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(tp.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(tp.queue, binding, tp.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("clean up %s: %v", tp.queue, err)
			return
		}
		defer ch.Close()
		if _, err := ch.QueueDelete(tp.queue, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", tp.queue, err)
		}
		if err := ch.ExchangeDelete(tp.exchange, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", tp.exchange, err)
		}
	})
	return tp
}

// read reads every message of the queue with basic.get, without consuming it: the
// channel closes unacknowledged, and RabbitMQ requeues the messages in their order.
// It returns them decoded, and their message-id properties.
func (tp topology) read(context.Context) ([]outbox.Message, []string, error) {
	ch, err := tp.conn.Channel()
	if err != nil {
		return nil, nil, err
	}
	defer ch.Close()
	var msgs []outbox.Message
	var ids []string
	for {
		d, ok, err := ch.Get(tp.queue, false)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return msgs, ids, nil
		}
		m, err := decode(d)
		if err != nil {
			return nil, nil, err
		}
		msgs, ids = append(msgs, m), append(ids, d.MessageId)
	}
}

// decode reads a delivery back into a message, checking its properties.
func decode(d amqp.Delivery) (outbox.Message, error) {
	var hs []sinkformat.Header
	for name, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			return outbox.Message{}, fmt.Errorf("header %s is a %T, not a string", name, v)
		}
		hs = append(hs, sinkformat.Header{Name: name, Value: s})
	}
	m, err := sinkformat.Decode(sinkformat.AMQP, hs, d.Body)
	if err != nil {
		return m, err
	}
	switch {
	case d.DeliveryMode != amqp.Persistent:
		return m, fmt.Errorf("message %s: delivery mode %d, want persistent", m.ID, d.DeliveryMode)
	case d.ContentType != m.ContentType || d.Type != m.EventType:
		return m, fmt.Errorf("message %s: properties content-type %q type %q, headers say %q and %q", m.ID, d.ContentType, d.Type, m.ContentType, m.EventType)
	}
	return m, nil
}

// newProxy starts an in-process TCP proxy to upstream (host:port), stopped when t ends.
func newProxy(t *testing.T, upstream string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, t.Name(), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// Relay scenarios: events written through Enqueue, a relay publishing them.

func fastConfig() *relay.Config {
	return &relay.Config{
		PollInterval: 20 * time.Millisecond, FallbackPollInterval: 50 * time.Millisecond,
		RetryBaseDelay: 20 * time.Millisecond, RetryMaxDelay: 200 * time.Millisecond,
		BreakerInitialDelay: 100 * time.Millisecond, BreakerMaxDelay: 400 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, LeaseTTL: time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
}

// writeEvents enqueues perAggregate events for each of n aggregates, interleaved, in
// transactions of 100, and returns them as the messages a consumer should read.
func writeEvents(t *testing.T, pool *pgxpool.Pool, prefix string, n, perAggregate int) []outbox.Message {
	t.Helper()
	var events []outbox.Event
	var want []outbox.Message
	for v := 1; v <= perAggregate; v++ {
		for a := range n {
			e := outbox.Event{
				ID: outbox.NewID(), AggregateType: "order", AggregateID: fmt.Sprintf("%s-%d", prefix, a), AggregateVersion: int64(v),
				EventType: "order.changed", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON,
				Headers: map[string]string{"tenant": "acme", "x-seq": fmt.Sprint(v)}, Payload: fmt.Appendf(nil, `{"v": %d}`, v),
				TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			}
			events = append(events, e)
			want = append(want, outbox.Message{
				ID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID, AggregateVersion: e.AggregateVersion,
				EventType: e.EventType, SchemaVersion: 1, Headers: e.Headers, ContentType: e.ContentType, Payload: e.Payload,
				TraceParent: e.TraceParent,
			})
		}
	}
	for len(events) > 0 {
		chunk := events[:min(100, len(events))]
		events = events[len(chunk):]
		if err := outbox.WithTx(t.Context(), pool, func(tx pgx.Tx) error { return outbox.Enqueue(t.Context(), outbox.PgxTx(tx), chunk...) }); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// runRelay runs a relay over pool and sink until t ends.
func runRelay(t *testing.T, pool *pgxpool.Pool, sink outbox.Sink, cfg *relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(pool, sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return r
}

// count runs a count query.
func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitCount waits until the count query returns want.
func waitCount(t *testing.T, pool *pgxpool.Pool, timeout time.Duration, want int, sql string) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%s = %d", sql, want), func() bool { return count(t, pool, sql) == want })
}

// waitFor polls cond every 20 ms until it holds, failing t after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
