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
type rotation struct {
	mu      sync.Mutex
	cursors map[string]string // aggregate type → the last aggregate id claimed
}

// args returns the cursors as claim_ordered_pick.sql's $7 (types) and $8 (ids).
func (r *rotation) args() (types, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, id := range r.cursors {
		types, ids = append(types, t), append(ids, id)
	}
	return types, ids
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
