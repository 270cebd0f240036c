package relay

import (
	"fmt"
	"sync"
)

// fullWalkEvery is how often (in claims of one scope) an ordered claim looks for the full
// BatchSize heads while a head hint is in force.
const fullWalkEvery = 8

// headHint keeps an ordered relay from walking its whole backlog on every claim when it
// owns fewer aggregates than BatchSize. The claim walks pending rows in seq order until it
// has found its heads; with fewer aggregates than that, it never stops early. When a
// claim found fewer heads than it asked for, the walk covered every pending row of the
// scope, so the next claims ask for that many heads only and stop where the last of them
// is found. Every fullWalkEvery-th claim asks for BatchSize again, so an aggregate that
// appears later (its rows are newer, at the end of the walk) waits at most that many
// claims.
//
// The hint is taken only from a deep walk: one whose batch holds at least twice as many
// events as heads, i.e. aggregates with a backlog behind their heads, which is what makes
// walking everything costly. A shallow walk (a steady trickle of events, each its own
// aggregate's head) is cheap, and a hint from it would cap the next batches at the few
// heads there were then: at 2,000 events/s the relay fell behind and stayed behind.
type headHint struct {
	mu     sync.Mutex
	scope  string // the claim scope the hint is for
	heads  int    // heads to ask for; 0: BatchSize
	claims int    // claims since the last full walk
}

// limit returns how many heads the next claim in scope asks for, and whether that is
// the full BatchSize.
func (h *headHint) limit(scope []int, batchSize int) (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.heads == 0 || h.scope != fmt.Sprint(scope) || h.claims+1 >= fullWalkEvery {
		return batchSize, true
	}
	h.claims++
	return min(h.heads, batchSize), false
}

// observe records that a claim in scope asked for limit heads and found found, in a
// batch of events events.
func (h *headHint) observe(scope []int, limit, found, events int, full bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if full {
		h.scope, h.claims = fmt.Sprint(scope), 0
	}
	switch {
	case found < limit && found > 0 && events >= 2*found:
		h.heads = found // a deep walk ran out of rows: there are no more heads than this
	case full || found < limit:
		h.heads = 0
	}
}
