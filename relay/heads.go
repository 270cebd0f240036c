package relay

import (
	"fmt"
	"sync"
)

// fullClaimEvery is how often (in claims of one scope) an ordered claim looks for the full
// BatchSize heads while a head hint is in force.
const fullClaimEvery = 8

// headHint keeps an ordered relay from walking its whole backlog on every claim when it
// owns fewer aggregates than BatchSize. The claim walks pending rows in seq order until it
// has found its heads; with fewer aggregates than that, it never stops early. When a
// claim found fewer heads than it asked for, the walk covered every pending row of the
// scope, so the next claims ask for that many heads only and stop where the last of them
// is found.
//
// Every fullClaimEvery-th claim asks for BatchSize again, so an aggregate that appears
// later (its rows are newer, at the end of the walk) waits at most that many claims. That
// claim does not walk the backlog: it discovers the heads by a loose index scan, one index
// descent per aggregate with a pending row (claim_ordered_pick.sql), which is what a hint says
// is cheap: few aggregates, each with a backlog. At 200k pending rows over 1,000
// aggregates, a quarter of them in scope, the walk took 540 ms and discovery 115 ms (both
// claiming 2,540 rows). The first claim in a scope (after start, or when the relay's
// leases change) and the first after an empty one discover too, as the relay does not
// know yet how many aggregates there are: it is the claim that would otherwise walk a
// whole backlog left by an outage, or written while the relay was idle (four relays
// each walking a fresh backlog of 200k rows took 2 s over that claim).
//
// Discovery reads at most discoverPerHead aggregates per head asked for (times
// partitions / partitions in scope): with many aggregates, it finds its heads among the
// first ones in key order, which are not the oldest; later claims walk, and a walk takes
// the oldest heads first, so no aggregate waits for ever, and no discovery reads more
// than the cap.
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
	claims int    // claims since the last full claim
}

// discoverPerHead is how many aggregates a discovery claim reads per head it asks for,
// times partitions / partitions in scope (with 4 relays, each reads up to
// 4 × discoverPerHead aggregates per head: the others' aggregates are in the same index).
const discoverPerHead = 2

// headPlan is how an ordered claim finds its heads.
type headPlan struct {
	limit    int  // heads to ask for
	full     bool // limit is BatchSize
	discover int  // > 0: by a loose index scan of at most this many aggregates; 0: by a walk
}

// plan returns how the next claim in scope finds its heads. partitions is the number of
// relay partitions (scope nil: all of them).
func (h *headHint) plan(scope []int, batchSize, partitions int) headPlan {
	h.mu.Lock()
	defer h.mu.Unlock()
	newScope := h.scope != fmt.Sprint(scope)
	switch {
	case newScope || h.heads > 0 && h.claims+1 >= fullClaimEvery:
		share := 1
		if len(scope) > 0 {
			share = max(1, partitions/len(scope))
		}
		return headPlan{limit: batchSize, full: true, discover: discoverPerHead * batchSize * share}
	case h.heads == 0:
		return headPlan{limit: batchSize, full: true}
	}
	h.claims++
	return headPlan{limit: min(h.heads, batchSize)}
}

// observe records that a claim in scope, planned as p, found found heads, in a batch of
// events events.
func (h *headHint) observe(scope []int, p headPlan, found, events int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if found == 0 {
		// Nothing to learn from: the next claim (after a backlog is written, say)
		// discovers, as a first claim does.
		h.scope, h.heads = "", 0
		return
	}
	if p.full {
		h.scope, h.claims = fmt.Sprint(scope), 0
	}
	switch {
	case found < p.limit && events >= 2*found:
		h.heads = found // a deep walk ran out of rows: there are no more heads than this
	case p.full || found < p.limit:
		h.heads = 0
	}
}
