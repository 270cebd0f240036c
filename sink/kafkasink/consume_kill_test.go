package kafkasink_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/killtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/kafkasink"
)

// seedsEnv holds the kfake cluster's addresses, comma-separated, for the kill test's
// child processes.
const seedsEnv = "OUTBOX_E2E_SEEDS"

// The kill test's topic and consumer group.
const killTopic, killGroup = "e2e.order", "projection"

// TestE2ERole is not a test: it is the body of a relay or consumer process of
// TestSIGKILLedRelayAndConsumer, and skips when run as a test.
func TestE2ERole(t *testing.T) {
	ctx, pool, role := killtest.Child(t)
	seeds := strings.Split(os.Getenv(seedsEnv), ",")
	switch role {
	case killtest.RoleRelay:
		sink, err := kafkasink.New(&kafkasink.Config{Options: []kgo.Opt{kgo.SeedBrokers(seeds...)}, Topic: "e2e.{{.AggregateType}}"})
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		r, err := relay.New(pool, sink, &relay.Config{PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Run(ctx))
	case killtest.RoleConsumer:
		c, err := inbox.New(&inbox.Config{Name: killGroup})
		if err != nil {
			t.Fatal(err)
		}
		// One record in 20 fails twice in each process and is retried in place while the
		// records after it complete: at each kill some are retrying, and the committed
		// offset must not have passed them.
		r, err := kafkasink.NewRunner(pool, c, killtest.Flaky(killtest.Effect, 20, 2), &kafkasink.RunnerConfig{
			Seeds: seeds, Group: killGroup, Topics: []string{killTopic}, Workers: 8,
			RetryDelay: 50 * time.Millisecond, CommitInterval: 20 * time.Millisecond,
			ClientOpts: []kgo.Opt{
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				// A killed member never leaves the group: its session ends it soon.
				kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond),
				kgo.RebalanceTimeout(2 * time.Second),
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Run(ctx))
	}
}

// Producer (business row + Enqueue) → relay process → Kafka (kfake in this process,
// 3 partitions, on loopback) → consumer process (Runner, inbox) → effects: 3,000 events
// (OUTBOX_E2E_EVENTS) over 200 aggregates, one record in 20 retrying in place, while the
// relay and the consumer are each killed with SIGKILL and restarted three times: every
// committed event's effect exactly once, per aggregate in version order, none lost —
// which holds only if each killed consumer had committed no offset past a record it had
// not finished.
func TestSIGKILLedRelayAndConsumer(t *testing.T) {
	url := killtest.Database(t)
	t.Parallel()
	seeds := newCluster(t, kfake.GroupMinSessionTimeout(100*time.Millisecond)).ListenAddrs()
	createTopic(t, newAdmin(t, seeds), killTopic, 3, nil)
	killtest.Run(t, &killtest.Scenario{
		DB: url, Env: []string{seedsEnv + "=" + strings.Join(seeds, ",")},
		Events: killtest.Events(t, 3000), Aggregates: 200, Rounds: 3,
	})
}
