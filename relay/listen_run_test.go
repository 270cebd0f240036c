package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// With the default Wakeup, Run starts the listener: Notifier wake-ups reach the relay
// within milliseconds, also after its backend was terminated, and stopping the relay
// closes the listener's connection.
func TestRunStartsWakeupListener(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := slowPollConfig()
	cfg.Wakeup = "" // the default: listen
	r := newRelay(t, pool, sink, cfg)
	stop := start(t, r)
	waitUntil(t, 10*time.Second, "the relay's listener to pass its self-test", func() bool { return r.Stats().WakeupListening })
	n := newNotifier(t, pool)
	for i := range 3 {
		id := fmt.Sprintf("woken-%d", i)
		enqueueOne(t, pool, n, id)
		waitFor(t, sink, wakeDeadline, id, delivered(id))
	}

	old := terminateListeners(t, pool)
	waitUntil(t, 10*time.Second, "a new listener backend", func() bool {
		now := listenerPIDs(t, pool)
		return len(now) == 1 && now[0] != old[0]
	})
	enqueueOne(t, pool, n, "after-kill")
	waitFor(t, sink, wakeDeadline, "after-kill", delivered("after-kill"))

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the listener's backend to go after Run returned", func() bool { return len(listenerPIDs(t, pool)) == 0 })
}

// Wakeup "poll": no listener connection; the relay delivers by polling.
func TestRunWakeupPollHasNoListener(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	sink := &memsink.Sink{}
	cfg := fastConfig()
	cfg.Wakeup = relay.WakeupPoll
	r := newRelay(t, pool, sink, cfg)
	start(t, r)
	enqueue(t, pool, aggregates("p", 3), 3)
	waitFor(t, sink, 20*time.Second, "9 events", distinct(9))
	if pids := listenerPIDs(t, pool); len(pids) != 0 {
		t.Fatalf("Wakeup poll, yet listener backends %v", pids)
	}
	if r.Stats().WakeupListening {
		t.Fatal("Stats.WakeupListening with Wakeup poll")
	}
}

func TestConfigWakeupValidated(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	_, err := relay.New(pool, &memsink.Sink{}, &relay.Config{Wakeup: "push"})
	if err == nil || !strings.Contains(err.Error(), "Wakeup") {
		t.Fatalf("Wakeup push: err = %v; want an error naming Wakeup", err)
	}
}
