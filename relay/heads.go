package relay

import (
	"sync"

	"github.com/outboxkit/outbox"
)

// maxCursors bounds the aggregate types a rotation remembers a cursor for.
const maxCursors = 1024

// rotation keeps, per aggregate type, where the last ordered claim stopped: the claim
// reads each type's aggregates in key order from there (claim_ordered_pick.sql), so every
// aggregate gets its turn and a type's first aggregates in key order cannot keep the
// others waiting. A cursor is a position in key space, valid in any scope.
//
// It also keeps the limits of the next claim's heads per type (share): the claim's
// equal shares are a start, and a type that needs less than its share leaves the rest to
// the types that need more.
type rotation struct {
	mu      sync.Mutex
	cursors map[string]string // aggregate type → the last aggregate id claimed
	// limits: aggregate type → the most heads of it the next claim takes, as share set
	// them for a claim of limitsFor heads
	limits    map[string]int
	limitsFor int
}

// args returns the cursors as claim_ordered_pick.sql's @cursor_types and @cursor_ids,
// and the limits, for a claim of heads heads, as its @limit_types and @limits.
func (r *rotation) args(heads int) (types, ids, limitTypes []string, limits []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, id := range r.cursors {
		types, ids = append(types, t), append(ids, id)
	}
	for t, n := range r.limits {
		if heads != r.limitsFor { // a narrowed claim (poison.go): the same proportions
			n = max(1, n*heads/max(1, r.limitsFor))
		}
		limitTypes, limits = append(limitTypes, t), append(limits, n)
	}
	return types, ids, limitTypes, limits
}

// share sets the limits of the next claim from this one: msgs, what it claimed of
// heads heads, and full, the types that had more claimable heads than their limit
// (claim_ordered_pick.sql's shares_full). Each type's fair share is heads in proportion
// to its weight (weights; 1 when not named) among the types of this claim. A type that
// took less than its limit needs no more: its next limit is twice what it took (at least
// one: room to grow), at most its fair share. The types that had more split what the
// others leave, in proportion to their weights, so the claim is full whenever some type
// has the heads to fill it. A type this claim did not take gets the claim's equal share
// (no limit), and so does every type when none had more than its limit.
func (r *rotation) share(msgs []outbox.Message, full []string, heads int, weights map[string]int) {
	took := map[string]int{}
	counted := make(map[aggregateKey]bool, len(msgs))
	for _, m := range msgs {
		if k := keyOf(m); !counted[k] {
			counted[k] = true
			took[m.AggregateType]++
		}
	}
	if len(full) == 0 {
		// no type had more than its limit: the equal shares did (a limit that is only room
		// to grow would cut a trickle's claims short, each then followed by another)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.limits, r.limitsFor = nil, heads
		return
	}
	hungry := make(map[string]bool, len(full))
	for _, t := range full {
		hungry[t] = true
		if _, ok := took[t]; !ok {
			took[t] = 0 // it had more heads than its limit, none of which this claim could lock
		}
	}
	weight := func(t string) int {
		if w := weights[t]; w > 0 {
			return w
		}
		return 1
	}
	total, hungryWeight := 0, 0
	for t := range took {
		total += weight(t)
		if hungry[t] {
			hungryWeight += weight(t)
		}
	}
	limits := make(map[string]int, len(took))
	left := heads
	for t, n := range took {
		if !hungry[t] {
			limits[t] = min(max(1, heads*weight(t)/total), max(1, 2*n))
			left -= limits[t]
		}
	}
	for t := range hungry {
		limits[t] = max(1, max(0, left)*weight(t)/hungryWeight)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limits, r.limitsFor = limits, heads
}

// advance moves each type's cursor to the last aggregate of msgs (a claimed batch) in the
// claim's rotation order: the greatest id at or before the old cursor when the claim
// wrapped round the end, else the greatest.
func (r *rotation) advance(msgs []outbox.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cursors == nil {
		r.cursors = map[string]string{}
	}
	type last struct{ after, wrapped string } // greatest id after the cursor, greatest at or before it
	lasts := map[string]*last{}
	for _, m := range msgs {
		l := lasts[m.AggregateType]
		if l == nil {
			l = &last{}
			lasts[m.AggregateType] = l
		}
		cur, ok := r.cursors[m.AggregateType]
		switch {
		case ok && m.AggregateID <= cur:
			l.wrapped = max(l.wrapped, m.AggregateID)
		default:
			l.after = max(l.after, m.AggregateID)
		}
	}
	for t, l := range lasts {
		if _, ok := r.cursors[t]; !ok && len(r.cursors) >= maxCursors {
			clear(r.cursors) // types come and go: start the rotations again rather than grow
		}
		if l.wrapped != "" {
			r.cursors[t] = l.wrapped
		} else {
			r.cursors[t] = l.after
		}
	}
}
