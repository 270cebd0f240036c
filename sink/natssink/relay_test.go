package natssink_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/sinktest"
)

// reader reads st with a plain ordered consumer.
func reader(st jetstream.Stream) func(context.Context) ([]outbox.Message, error) {
	return func(ctx context.Context) ([]outbox.Message, error) {
		msgs, _, err := readStream(ctx, st)
		return msgs, err
	}
}

// 1,000 events over 50 aggregates go through the relay to JetStream and come back,
// through a plain ordered consumer, once each, intact, in order per aggregate.
func TestRelayEndToEnd(t *testing.T) {
	t.Parallel()
	_, js := connect(t, startServer(t).ClientURL())
	st := createStream(t, js, "outbox")
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RelayDelivers(t, relayHarness(t, sink, reader(st), nil))
}

// With the server out of reach (a proxy stopped in between), the backlog grows and
// no event has an attempt counted or goes dead: the sink reports the outage and the
// relay's breaker holds. Once the proxy is back, everything arrives, at least once,
// in order of first delivery per aggregate.
func TestRelayOutage(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	_, admin := connect(t, srv.ClientURL())
	st := createStream(t, admin, "outbox")
	p := newProxy(t, hostPort(t, srv.ClientURL()))
	_, js := connect(t, "nats://"+p.Listen)
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name, AckTimeout: time.Second, HealthTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RelayOutage(t, relayHarness(t, sink, reader(st), proxySetDown(t, p)))
}

// An event routed to a subject no stream takes is dead at once with a readable
// reason; the other aggregates flow.
func TestRelayNoStreamIsDead(t *testing.T) {
	t.Parallel()
	_, js := connect(t, startServer(t).ClientURL())
	st := createStream(t, js, "outbox")
	sink, err := natssink.New(t.Context(), js, &natssink.Config{Stream: st.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.RelayRejects(t, relayHarness(t, sink, reader(st), nil),
		func(e *outbox.Event) { e.Topic = "nowhere.orders" }, `no stream takes subject "nowhere.orders"`)
}
