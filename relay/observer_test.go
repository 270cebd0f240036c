package relay_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

type recordingObserver struct {
	mu      sync.Mutex
	reports []relay.BatchReport
}

func (o *recordingObserver) BatchSettled(b relay.BatchReport) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reports = append(o.reports, b)
}

func (o *recordingObserver) outcomes() map[relay.Outcome]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[relay.Outcome]int{}
	for _, r := range o.reports {
		for _, e := range r.Events {
			out[e.Outcome]++
		}
	}
	return out
}

// TestObserverSeesEachOutcome: Config.Observer is told each settled event's outcome —
// published, dead (a permanent failure), not attempted (behind it in its aggregate) —
// with its type and creation time, and each batch's duration.
func TestObserverSeesEachOutcome(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	enqueue(t, pool, []string{"ok1", "ok2", "bad"}, 2) // 6 events
	sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		if m.AggregateID == "bad" {
			return outbox.Permanent(errors.New("refused"))
		}
		return nil
	}}
	obs := &recordingObserver{}
	r, err := relay.New(pool, sink, &relay.Config{Wakeup: relay.WakeupPoll, PollInterval: 10 * time.Millisecond, Observer: obs, PublishPastDead: []string{"order"}})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	waitFor(t, sink, 30*time.Second, "the 4 good events", distinct(4))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); obs.outcomes()[relay.OutcomeDead] < 2 && time.Now().Before(deadline); {
		<-tick.C
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := obs.outcomes()
	if got[relay.OutcomePublished] != 4 || got[relay.OutcomeDead] != 2 {
		t.Errorf("outcomes: %v, want 4 published and 2 dead", got)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, b := range obs.reports {
		if !b.Late && b.Duration <= 0 {
			t.Errorf("a batch report without its duration: %+v", b)
		}
		for _, e := range b.Events {
			if e.EventType != "order.changed" || e.AggregateType != "order" || e.CreatedAt.IsZero() || e.Attempt < 1 {
				t.Errorf("an event report lacks its fields: %+v", e)
			}
		}
	}
}
