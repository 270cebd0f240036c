package amqpsink_test

import (
	"os"
	"testing"
	"time"

	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/killtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/amqpsink"
)

// The environment of the kill test's child processes, besides killtest's.
const (
	exchangeEnv = "OUTBOX_E2E_EXCHANGE"
	queueEnv    = "OUTBOX_E2E_QUEUE"
)

// TestE2ERole is not a test: it is the body of a relay or consumer process of
// TestSIGKILLedRelayAndConsumer, and skips when run as a test.
func TestE2ERole(t *testing.T) {
	ctx, pool, role := killtest.Child(t)
	switch role {
	case killtest.RoleRelay:
		sink, err := amqpsink.New(&amqpsink.Config{
			URL: brokerURL(brokerAddr), Exchange: os.Getenv(exchangeEnv),
			ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sink.Close() }()
		r, err := relay.New(pool, sink, &relay.Config{PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Run(ctx))
	case killtest.RoleConsumer:
		c, err := inbox.New(&inbox.Config{Name: "inventory"}) // GapPark: retried messages come back behind later versions
		if err != nil {
			t.Fatal(err)
		}
		r, err := amqpsink.NewRunner(pool, c, killtest.Flaky(killtest.Effect, 25, 1), &amqpsink.RunnerConfig{
			URL: brokerURL(brokerAddr), Queue: os.Getenv(queueEnv), Workers: 8, RetryDelay: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Run(ctx))
	}
}

// Producer (business row + Enqueue) → relay process → RabbitMQ → consumer process
// (Runner, inbox with GapPark) → effects: 4,000 events (OUTBOX_E2E_EVENTS) over 200
// aggregates, one in 25 failing once in each consumer process (it comes back through
// the retry queue, behind its aggregate's later versions, which park), while the relay
// and the consumer are each killed with SIGKILL and restarted three times: every
// committed event's effect exactly once, per aggregate in version order, none lost.
func TestSIGKILLedRelayAndConsumer(t *testing.T) {
	url := killtest.Database(t)
	t.Parallel()
	tp := newTopology(t, "#")
	t.Cleanup(func() { deleteQueue(t, tp, tp.queue+".retry") })
	res := killtest.Run(t, &killtest.Scenario{
		DB:     url,
		Env:    []string{exchangeEnv + "=" + tp.exchange, queueEnv + "=" + tp.queue},
		Events: killtest.Events(t, 4000), Aggregates: 200, Rounds: 3,
	})
	if res.Unparked == 0 {
		t.Fatal("no effect was applied from the park: the retried messages never came back behind later versions, so the version policy was not exercised")
	}
	t.Logf("%d effects applied from the park", res.Unparked)
}

// deleteQueue deletes a queue the runner declared.
func deleteQueue(t *testing.T, tp topology, queue string) {
	t.Helper()
	ch, err := tp.conn.Channel()
	if err != nil {
		t.Errorf("delete queue %s: %v", queue, err)
		return
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Errorf("delete queue %s: %v", queue, err)
	}
}
