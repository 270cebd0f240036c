package amqpsink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// newSink returns a sink on url publishing to exchange, closed when t ends.
func newSink(t *testing.T, url, exchange string, cfg *amqpsink.Config) *amqpsink.Sink {
	t.Helper()
	c := amqpsink.Config{ConfirmTimeout: 5 * time.Second, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
	if cfg != nil {
		c = *cfg
	}
	c.URL, c.Exchange = url, exchange
	s, err := amqpsink.New(&c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// harness builds a sink on an exchange and queue of its own, through a proxy the
// suite can take down. The queue takes routing keys "msg.#"; FailWhen routes the
// refused messages to a key no queue takes, which the broker returns.
func harness(t *testing.T) sinktest.Harness {
	tp := newTopology(t, "msg.#")
	p := newProxy(t, brokerAddr)
	sink := newSink(t, brokerURL(p.Listen), tp.exchange, &amqpsink.Config{
		RoutingKey: "msg.{{.AggregateType}}", ConfirmTimeout: 5 * time.Second,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
	})
	var refusals sinktest.Refusals
	return sinktest.Harness{
		Sink: sinktest.Reroute(sink, func(m outbox.Message) string {
			switch {
			case refusals.Refused(m):
				return "refused." + m.ID.String()
			case m.Topic != "":
				return "msg." + m.Topic
			}
			return ""
		}),
		Received: func(ctx context.Context) ([]outbox.Message, error) {
			msgs, _, err := tp.read(ctx)
			return msgs, err
		},
		MessageIDs: func(ctx context.Context) ([]string, error) {
			_, ids, err := tp.read(ctx)
			return ids, err
		},
		FailWhen:      refusals.Set,
		SetDown:       proxySetDown(t, p),
		OutageTimeout: 15 * time.Second,
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, harness, sinktest.Features{})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  *amqpsink.Config
		want string
	}{
		{nil, "URL is required"},
		{&amqpsink.Config{URL: brokerURL(brokerAddr), ConfirmTimeout: -time.Second}, "ConfirmTimeout"},
		{&amqpsink.Config{URL: brokerURL(brokerAddr), ReconnectMin: time.Second, ReconnectMax: time.Millisecond}, "ReconnectMax"},
		{&amqpsink.Config{URL: brokerURL(brokerAddr), RoutingKey: "{{.Key}}"}, "RoutingKey"},
		{&amqpsink.Config{URL: brokerURL(brokerAddr), Format: "xml"}, "Format"},
		{&amqpsink.Config{URL: "amqp://guest:guest@127.0.0.1:1/"}, "dial"},
	} {
		if _, err := amqpsink.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error about %s", c.cfg, err, c.want)
		}
	}
}

// A message the broker nacks (its queue is full and rejects publishes) fails
// transiently, alone: neither an outage nor a permanent failure.
func TestNackIsTransient(t *testing.T) {
	t.Parallel()
	tp := newTopologyArgs(t, brokerAddr, "order.#", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	sink := newSink(t, brokerURL(brokerAddr), tp.exchange, nil)
	msg := func(id string) outbox.Message {
		return outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: id, EventType: "order.paid", SchemaVersion: 1, Attempt: 1}
	}
	if err := sink.Publish(t.Context(), []outbox.Message{msg("o-1")})[0]; err != nil {
		t.Fatal(err)
	}
	err := sink.Publish(t.Context(), []outbox.Message{msg("o-2")})[0]
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "nacked") {
		t.Fatalf("publish into a full reject-publish queue: %v, want a transient nack", err)
	}
}
