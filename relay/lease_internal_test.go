package relay

import (
	"log/slog"
	"slices"
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

// When the deal moves under a batch (here the relay's active workers go from 2 to 1), the
// worker dealt that batch's partitions leaves them out of its claims until the batch's
// transaction ends: reading rows a sibling's commit changes after its snapshot, a claim
// re-checked each of them against the whole statement (2–3 s of CPU for 4 partitions in
// a cold start of 4 relays). Its late settle does not hold them back, and the share
// (dealt) is the whole one, so dealMoved sees no move. The end of the sibling's
// transaction wakes the workers, once: a by-seq batch (PublishSeqs) sends no other
// wake-up, and the worker that was passed over would wait for its poll.
func TestClaimableLeavesOutASiblingsPartitionsUntilItsTransactionEnds(t *testing.T) {
	t.Parallel()
	cfg := &Config{Mode: Ordered, Partitions: 4}
	wakes := 0
	k := newLeaseKeeper(nil, nil, cfg, "me", slog.New(slog.DiscardHandler), &counters{}, func() { wakes++ })
	now := time.Now()
	later := now.Add(time.Minute)
	k.owned = map[int]*lease{0: {epoch: 1, deadline: later}, 1: {epoch: 1, deadline: later}, 2: {epoch: 1, deadline: later}, 3: {epoch: 1, deadline: later}}

	sibling := k.claimable(now, workerShare{index: 1, of: 2}) // worker 1 of 2: partitions 1 and 3
	if !slices.Equal(sibling.parts, []int{1, 3}) {
		t.Fatalf("worker 1 of 2 claims from %v, want [1 3]", sibling.parts)
	}
	mine := k.claimable(now, workerShare{index: 0, of: 1}) // now worker 0 alone
	if !slices.Equal(mine.parts, []int{0, 2}) || !slices.Equal(mine.dealt, []int{0, 1, 2, 3}) {
		t.Fatalf("with the sibling's batch in its transaction: parts %v dealt %v, want [0 2] and [0 1 2 3]", mine.parts, mine.dealt)
	}
	mine.done()
	if wakes != 0 {
		t.Fatalf("%d wake-ups before the sibling's transaction ended", wakes)
	}
	sibling.ended() // committed; its late settle still runs
	if wakes != 1 {
		t.Fatalf("%d wake-ups when the sibling's transaction ended, want 1", wakes)
	}
	mine = k.claimable(now, workerShare{index: 0, of: 1})
	if !slices.Equal(mine.parts, []int{0, 1, 2, 3}) {
		t.Fatalf("after the sibling's transaction ended: parts %v, want all four", mine.parts)
	}
	if k.owned[1].busy != 2 {
		t.Errorf("partition 1 busy %d, want 2 (the sibling's late settle and this batch)", k.owned[1].busy)
	}
	mine.done()
	sibling.done() // calls ended again: counted once
	if wakes != 1 {
		t.Errorf("%d wake-ups in all, want 1", wakes)
	}
	for p, l := range k.owned {
		if l.busy != 0 || l.claiming != [lanes]int{} {
			t.Errorf("partition %d: busy %d claiming %d after every batch ended", p, l.busy, l.claiming)
		}
	}
}
