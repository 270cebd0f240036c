package natssink_test

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/killtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/natssink"
)

// The environment of the kill test's child processes, besides killtest's.
const (
	natsEnv   = "OUTBOX_E2E_NATS"
	streamEnv = "OUTBOX_E2E_STREAM"
)

// TestE2ERole is not a test: it is the body of a relay or consumer process of
// TestSIGKILLedRelayAndConsumer, and skips when run as a test.
func TestE2ERole(t *testing.T) {
	ctx, pool, role := killtest.Child(t)
	nc, err := nats.Connect(os.Getenv(natsEnv), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	switch role {
	case killtest.RoleRelay:
		sink, err := natssink.New(ctx, js, &natssink.Config{Stream: os.Getenv(streamEnv)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := relay.New(pool, sink, &relay.Config{PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Run(ctx))
	case killtest.RoleConsumer:
		cons, err := js.Consumer(ctx, os.Getenv(streamEnv), "inventory")
		if err != nil {
			t.Fatal(err)
		}
		c, err := inbox.New(&inbox.Config{Name: "inventory"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := natssink.NewRunner(cons, pool, c, killtest.Effect, &natssink.RunnerConfig{Workers: 8, RetryDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Run(ctx))
	}
}

// Producer (business row + Enqueue) → relay process → JetStream → consumer process →
// inbox: 10,000 events (OUTBOX_E2E_EVENTS) over 200 aggregates while the relay and the
// consumer are each killed with SIGKILL and restarted three times: every committed
// event's effect exactly once, per aggregate in version order, none lost.
func TestSIGKILLedRelayAndConsumer(t *testing.T) {
	url := killtest.Database(t)
	t.Parallel()
	srv := startServer(t)
	_, js := connect(t, srv.ClientURL())
	st := createStream(t, js, "outbox")
	if _, err := st.CreateOrUpdateConsumer(t.Context(), jetstreamConsumerConfig("inventory")); err != nil {
		t.Fatal(err)
	}
	killtest.Run(t, &killtest.Scenario{
		DB:     url,
		Env:    []string{natsEnv + "=" + srv.ClientURL(), streamEnv + "=" + st.CachedInfo().Config.Name},
		Events: killtest.Events(t, 10000), Aggregates: 200, Rounds: 3,
	})
}
