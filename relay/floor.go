package relay

import (
	"sync"
	"time"
)

// Defaults of the floor's bookkeeping (docs/adr/0010-claim-floor.md).
const (
	// floorWindow is how long after its statement an observation waits before a later
	// snapshot can seal it: the time a writer may take between taking a seq (nextval)
	// and being given a transaction id, during which no snapshot shows it running.
	floorWindow = time.Second
	// floorFullEvery is how often a claim reads from the first row anyway: the safety
	// net for rows made pending out of band (an UPDATE by hand, a writer that broke the
	// floor's assumptions).
	floorFullEvery = 30 * time.Second
	// floorObservations caps the observations kept; floorSpacing spaces them, so the
	// ones kept span floorObservations × floorSpacing (6.4 s) however fast claims run.
	floorObservations = 64
	floorSpacing      = 100 * time.Millisecond
)

// seen is what a claim statement saw (claim_seen.sql): the lowest pending seq at or above
// its bound (0: none), its snapshot's xmin and xmax, and the last replay's id; and, not
// the floor's, how long after the statement's start the next pending row not yet
// available comes due (0: none seen).
type seen struct {
	minPending, xmin, xmax, replays int64
	due                             time.Duration
	// ordered: the claim is a polling ordered claim, whose last column, read into
	// sharesFull, names the aggregate types that had more heads than their share
	ordered    bool
	sharesFull []string
}

// floorArgs are claim_floor.sql's parameters for one statement, as floor.args gave them.
type floorArgs struct {
	floor, replays int64
	sent           time.Time // when the statement was sent, before its snapshot was taken
}

// observation is one claim's seen, with when it ran: its snapshot was taken between sent
// and received.
type observation struct {
	seen
	sent, received time.Time
}

// floor keeps the seq below which no event is pending, so a claim reads the pending
// rows from there rather than from the first entry of the pending indexes, which are
// the dead entries of every row drained since the last VACUUM (claim_floor.sql). The
// relay's workers share one.
//
// A claim reports what it saw (seen). An observation O (lowest pending seq m) becomes a
// floor once a later snapshot's xmin is at least the xmax of a snapshot taken at least
// floorWindow after O: every transaction that had taken a seq below m when O ran (seqs
// come from a sequence of CACHE 1, so a seq below m was taken before m's row committed)
// had then ended, and the later snapshot saw whatever they left pending. The floor is
// then the lower of m and that snapshot's lowest pending seq. A replay (dead rows made
// pending again, at any seq) is seen through the replays table: claims read from the
// first row (claim_floor.sql) until an observation that saw the replay is sealed.
type floor struct {
	mu      sync.Mutex
	seq     int64 // the floor; 0: read from the first row
	replays int64 // the last replay whose rows the floor accounts for
	obs     []observation
	// lastFull is, per worker, when its last claim from the first row was sent. Per
	// worker: an ordered worker claims from its share of the partitions only
	// (workerShare), and an empty claim reports nothing, so one worker's full claim
	// that found nothing in its share said nothing of a row made pending out of band in
	// the other's.
	lastFull [maxWorkers]time.Time
}

// maxWorkers bounds Config.Concurrency.
const maxWorkers = 64

// args returns the parameters of worker's next claim at now: every floorFullEvery a
// claim from the first row.
func (f *floor) args(now time.Time, worker int) floorArgs {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := floorArgs{floor: f.seq, replays: f.replays, sent: now}
	if w := &f.lastFull[min(worker, maxWorkers-1)]; now.Sub(*w) >= floorFullEvery {
		a.floor, *w = 0, now
	}
	return a
}

// current returns the floor's arguments as they stand, for a statement that reads from
// the floor without taking a worker's turn of the full claims.
func (f *floor) current() floorArgs {
	f.mu.Lock()
	defer f.mu.Unlock()
	return floorArgs{floor: f.seq, replays: f.replays, sent: time.Now()}
}

// observe takes in what a claim sent with a saw, received at received.
func (f *floor) observe(a floorArgs, s seen, received time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := observation{seen: s, sent: a.sent, received: received}
	if o.minPending != 0 && o.minPending < f.seq {
		// pending below the floor: a claim that read from below it (from the first row,
		// or from an older floor) saw a row made pending out of band; read from there
		f.seq = o.minPending
	}
	if s.replays > f.replays {
		// a replay the floor does not account for: the claims read from the first row
		// until one that saw it is sealed; the floor is recomputed then
		f.seq = 0
	}
	f.seal(o)
	if n := len(f.obs); n > 0 && (o.xmax < f.obs[n-1].xmax || o.sent.Sub(f.obs[n-1].sent) < floorSpacing) {
		return // out of order (an older snapshot, answered late) or too close to the last one
	}
	if len(f.obs) == floorObservations {
		f.obs = append(f.obs[:0], f.obs[1:]...)
	}
	f.obs = append(f.obs, o)
}

// seal moves the floor up to the newest observation that o seals: one for which a later
// kept observation, sent at least floorWindow after it was received, has an xmax no
// greater than o's xmin. Older observations are dropped.
func (f *floor) seal(o observation) {
	for i := len(f.obs) - 1; i >= 0; i-- {
		c := f.obs[i]
		if c.minPending == 0 || !f.sealedBy(i, o) {
			continue
		}
		next := c.minPending
		if o.minPending != 0 {
			next = min(next, o.minPending)
		}
		if c.replays > f.replays {
			// c saw a replay: o read from the first row (its replays were not
			// accounted for when it was sent), so next alone stands
			f.seq, f.replays = next, c.replays
		} else if s := max(f.seq, next); s > f.seq && o.replays <= f.replays {
			f.seq = s
		}
		f.obs = append(f.obs[:0], f.obs[i:]...)
		return
	}
}

// sealedBy reports whether o seals f.obs[i]: a kept observation (or o) sent at least
// floorWindow after f.obs[i] was received has an xmax no greater than o's xmin.
func (f *floor) sealedBy(i int, o observation) bool {
	c := f.obs[i]
	for _, w := range f.obs[i+1:] {
		if w.sent.Sub(c.received) >= floorWindow {
			return w.xmax <= o.xmin
		}
	}
	return o.sent.Sub(c.received) >= floorWindow && o.xmax <= o.xmin
}
