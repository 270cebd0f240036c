package amqpsink_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/sinkformat"
	"github.com/outboxkit/outbox/sink/sinktest"
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
	return newTopologyAt(t, brokerAddr, binding)
}

// newTopologyAt is newTopology on the broker at addr.
func newTopologyAt(t *testing.T, addr, binding string) topology {
	t.Helper()
	return newTopologyArgs(t, addr, binding, nil)
}

// newTopologyArgs is newTopologyAt with the queue declared with args.
func newTopologyArgs(t *testing.T, addr, binding string, args amqp.Table) topology {
	t.Helper()
	conn, err := amqp.Dial(brokerURL(addr))
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", addr, err)
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
	if _, err := ch.QueueDeclare(tp.queue, true, false, false, false, args); err != nil {
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

// proxySetDown is a SetDown that stops and restarts p.
func proxySetDown(t *testing.T, p *toxiproxy.Proxy) func(bool) {
	return func(down bool) {
		if down {
			p.Stop()
			return
		}
		if err := p.Start(); err != nil {
			t.Errorf("restart proxy: %v", err)
		}
	}
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

// relayHarness runs relays over a fresh database and sink for the sinktest scenarios.
func relayHarness(t *testing.T, sink outbox.Sink, read func(context.Context) ([]outbox.Message, error), setDown func(bool)) sinktest.RelayHarness {
	t.Helper()
	pool := pgtest.Pool(t)
	return sinktest.RelayHarness{
		Enqueue: func(ctx context.Context, events []outbox.Event) error {
			return outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) })
		},
		QueryRow: func(ctx context.Context, sql string, dest ...any) error { return pool.QueryRow(ctx, sql).Scan(dest...) },
		NewRelay: func(cfg *relay.Config) (*relay.Relay, error) { return relay.New(pool, sink, cfg) },
		Read:     read,
		SetDown:  setDown,
	}
}
