package amqpsink_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
