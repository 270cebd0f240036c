package relay

import (
	"log/slog"
	"testing"
	"time"
)

// A heartbeat that makes partitions claimable again which claims had left out — a lease
// renewed after its local deadline passed, a hand-over called off because a relay left
// — says so, so the keeper wakes the workers: one that probed meanwhile found nothing
// there and would otherwise sleep until its poll (with a long poll, a stalled backlog:
// TestDefaultConcurrencyIsSharedByRelays/ordered, 1 run in 10–30 before). A plain
// renewal wakes no one.
func TestHeartbeatThatRevivesPartitionsSaysSo(t *testing.T) {
	t.Parallel()
	newKeeper := func() *leaseKeeper {
		cfg := &Config{Mode: Ordered, Partitions: 4}
		return newLeaseKeeper(nil, nil, cfg, "me", slog.New(slog.DiscardHandler), &counters{}, func() {})
	}
	now := time.Now()
	later := now.Add(time.Minute)

	k := newKeeper()
	k.owned = map[int]*lease{0: {epoch: 1, deadline: later}, 1: {epoch: 1, deadline: later}}
	if _, _, revived := k.settle([]int32{0, 1}, []int{0, 1}, later, 2); revived {
		t.Error("a plain renewal reported partitions revived")
	}

	k = newKeeper()
	k.owned = map[int]*lease{0: {epoch: 1, deadline: now.Add(-time.Millisecond)}, 1: {epoch: 1, deadline: later}}
	if _, _, revived := k.settle([]int32{0, 1}, []int{0, 1}, later, 2); !revived {
		t.Error("a lease renewed past its local deadline was not reported revived")
	}

	k = newKeeper()
	k.owned = map[int]*lease{0: {epoch: 1, deadline: later}, 1: {epoch: 1, deadline: later, busy: 1, releasing: true}}
	release, _, revived := k.settle([]int32{0, 1}, []int{0, 1}, later, 2) // the other relay left: target 2
	if !revived || len(release) != 0 || k.owned[1].releasing {
		t.Errorf("a hand-over called off: revived %v, release %v, still releasing %v", revived, release, k.owned[1].releasing)
	}
}
