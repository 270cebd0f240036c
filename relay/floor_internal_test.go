package relay

import (
	"testing"
	"time"
)

// claimAt is what a claim sent at sent (answered 1 ms later) saw, taken in by f; it
// returns the floor after.
func claimAt(f *floor, sent time.Time, s seen) int64 {
	a := f.args(sent, 0)
	f.observe(a, s, sent.Add(time.Millisecond))
	return f.seq
}

// The floor moves to an observation's lowest pending seq only once a later snapshot
// shows that every transaction that could have held a lower seq has ended: its xmin at
// least the xmax of a snapshot taken floorWindow after the observation.
func TestFloorSealedByALaterSnapshot(t *testing.T) {
	t.Parallel()
	f := &floor{}
	t0 := time.Unix(1_000_000, 0)
	if a := f.args(t0, 0); a.floor != 0 {
		t.Fatalf("first claim from %d, want 0 (a full claim)", a.floor)
	}
	f.observe(floorArgs{sent: t0}, seen{minPending: 100, xmin: 10, xmax: 12}, t0.Add(time.Millisecond))
	// Within the window: nothing moves, whatever the xmin.
	if got := claimAt(f, t0.Add(500*time.Millisecond), seen{minPending: 150, xmin: 50, xmax: 50}); got != 0 {
		t.Fatalf("floor %d within the window, want 0", got)
	}
	// After the window, a snapshot with xmax 60, but its own xmin (55) is below its xmax:
	// transactions it saw running may still commit rows below 150.
	if got := claimAt(f, t0.Add(1100*time.Millisecond), seen{minPending: 150, xmin: 55, xmax: 60}); got != 0 {
		t.Fatalf("floor %d before any snapshot sealed the first observation, want 0", got)
	}
	// A later snapshot's xmin reaches 60: the first observation (100) is sealed, and
	// this one saw 120 pending (a late commit): the floor is the lower of the two.
	if got := claimAt(f, t0.Add(1200*time.Millisecond), seen{minPending: 120, xmin: 60, xmax: 61}); got != 100 {
		t.Fatalf("floor %d, want 100", got)
	}
	// The observation at 1.1 s (150) is sealed by one whose xmin passes the xmax of a
	// snapshot 1 s after it (the one at 2.2 s, xmax 70); this one still sees 130 pending.
	claimAt(f, t0.Add(2200*time.Millisecond), seen{minPending: 130, xmin: 62, xmax: 70})
	if got := claimAt(f, t0.Add(2300*time.Millisecond), seen{minPending: 130, xmin: 70, xmax: 71}); got != 130 {
		t.Fatalf("floor %d, want 130 (the lower of 150 and what the sealing snapshot saw)", got)
	}
}

// A transaction open for long (its xid held in every snapshot's xmin) keeps the floor
// where it was, however many claims see higher rows: it may commit a row below them.
func TestFloorWaitsForAnOpenTransaction(t *testing.T) {
	t.Parallel()
	f := &floor{}
	t0 := time.Unix(1_000_000, 0)
	for i := range 100 {
		at := t0.Add(time.Duration(i) * 200 * time.Millisecond)
		// xid 10 stays open: every snapshot's xmin is 10
		if got := claimAt(f, at, seen{minPending: int64(100 + i), xmin: 10, xmax: int64(20 + i)}); got != 0 {
			t.Fatalf("claim %d: floor %d while a transaction older than every observation is open, want 0", i, got)
		}
	}
	if len(f.obs) > floorObservations {
		t.Fatalf("%d observations kept, want at most %d", len(f.obs), floorObservations)
	}
	// It ends: the observations of the last seconds are sealed.
	end := t0.Add(20 * time.Second)
	got := claimAt(f, end, seen{minPending: 199, xmin: 200, xmax: 200})
	if got < 150 || got > 199 {
		t.Fatalf("floor %d after the transaction ended, want one of the last observations' (150–199)", got)
	}
}

// A replay newer than the floor accounts for resets it to 0 (the claims read from the
// first row meanwhile, claim_floor.sql), until an observation that saw the replay is
// sealed; then the floor is what that observation and the sealing one saw, even below
// the old floor.
func TestFloorReplay(t *testing.T) {
	t.Parallel()
	f := &floor{}
	t0 := time.Unix(1_000_000, 0)
	claimAt(f, t0, seen{minPending: 500, xmin: 10, xmax: 10})
	claimAt(f, t0.Add(1100*time.Millisecond), seen{minPending: 500, xmin: 11, xmax: 11})
	if got := claimAt(f, t0.Add(1200*time.Millisecond), seen{minPending: 501, xmin: 12, xmax: 12}); got != 500 {
		t.Fatalf("floor %d, want 500", got)
	}
	// Replay 1 made seq 7 pending: the claims, sent with replays 0, read from the
	// first row (claim_floor.sql) and see it.
	t1 := t0.Add(2 * time.Second)
	if got := claimAt(f, t1, seen{minPending: 7, xmin: 20, xmax: 20, replays: 1}); got != 0 {
		t.Fatalf("floor %d after a replay, want 0", got)
	}
	if a := f.args(t1.Add(10*time.Millisecond), 0); a.replays != 0 {
		t.Fatalf("claims sent with replays %d before the replay's observation is sealed, want 0", a.replays)
	}
	claimAt(f, t1.Add(1100*time.Millisecond), seen{minPending: 7, xmin: 21, xmax: 21, replays: 1})
	if got := claimAt(f, t1.Add(1200*time.Millisecond), seen{minPending: 7, xmin: 22, xmax: 22, replays: 1}); got != 7 {
		t.Fatalf("floor %d once the replay's observation is sealed, want 7 (the replayed row)", got)
	}
	if f.replays != 1 {
		t.Fatalf("replays %d, want 1", f.replays)
	}
}

// A claim that read from below the floor (a full claim) and saw a row pending there — one
// made pending out of band — lowers the floor to it at once.
func TestFloorLoweredByAFullClaim(t *testing.T) {
	t.Parallel()
	f := &floor{seq: 500}
	f.lastFull[0] = time.Unix(1_000_000, 0)
	t0 := f.lastFull[0].Add(floorFullEvery - time.Second)
	if a := f.args(t0, 0); a.floor != 500 {
		t.Fatalf("claim from %d, want the floor (500)", a.floor)
	}
	a := f.args(t0.Add(time.Second), 0)
	if a.floor != 0 {
		t.Fatalf("claim %s after the last full claim from %d, want 0", floorFullEvery, a.floor)
	}
	f.observe(a, seen{minPending: 42, xmin: 5, xmax: 6}, t0.Add(time.Second+time.Millisecond))
	if f.seq != 42 {
		t.Fatalf("floor %d after a full claim saw 42 pending, want 42", f.seq)
	}
	if b := f.args(t0.Add(2*time.Second), 0); b.floor != 42 {
		t.Fatalf("next claim from %d, want 42", b.floor)
	}
}

// Observations answered out of order (an older snapshot after a newer one) are not kept,
// and observations closer than floorSpacing are thinned, so the kept ones span seconds.
func TestFloorKeepsObservationsInOrder(t *testing.T) {
	t.Parallel()
	f := &floor{}
	t0 := time.Unix(1_000_000, 0)
	claimAt(f, t0, seen{minPending: 10, xmin: 5, xmax: 8})
	claimAt(f, t0.Add(time.Millisecond), seen{minPending: 10, xmin: 5, xmax: 9})      // too close
	claimAt(f, t0.Add(200*time.Millisecond), seen{minPending: 10, xmin: 5, xmax: 7})  // older snapshot
	claimAt(f, t0.Add(300*time.Millisecond), seen{minPending: 10, xmin: 5, xmax: 10}) // kept
	if len(f.obs) != 2 || f.obs[0].xmax != 8 || f.obs[1].xmax != 10 {
		t.Fatalf("kept %+v, want the snapshots with xmax 8 and 10", f.obs)
	}
}

// Each worker claims from the first row on its own schedule: an ordered worker reads only
// its share of the partitions, and an empty claim reports nothing, so one worker's full
// claim finding nothing in its share must not stand for the other's (a row made pending
// out of band there waited for the next full claim, 30 s on).
func TestFloorFullClaimsPerWorker(t *testing.T) {
	t.Parallel()
	f := &floor{seq: 500}
	now := time.Unix(1_000_000, 0)
	if a := f.args(now, 0); a.floor != 0 {
		t.Fatalf("worker 0's first claim from %d, want 0 (the first row)", a.floor)
	}
	if a := f.args(now.Add(time.Millisecond), 1); a.floor != 0 {
		t.Fatalf("worker 1's first claim from %d, want 0: worker 0's full claim does not cover its share", a.floor)
	}
	if a := f.args(now.Add(2*time.Millisecond), 0); a.floor != 500 {
		t.Fatalf("worker 0's next claim from %d, want the floor (500)", a.floor)
	}
}
