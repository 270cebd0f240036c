package relay

import (
	"slices"
	"testing"

	"github.com/outboxkit/outbox"
)

// A rotation's cursor per type moves to the last aggregate a claim took in the claim's
// order: the greatest id after the old cursor, or, when the claim wrapped round the end
// of the type's key space, the greatest id at or before the old cursor.
func TestRotationAdvance(t *testing.T) {
	t.Parallel()
	msg := func(typ, id string) outbox.Message { return outbox.Message{AggregateType: typ, AggregateID: id} }
	var r rotation
	if types, ids := r.args(); len(types) != 0 || len(ids) != 0 {
		t.Fatalf("a new rotation has cursors %v %v", types, ids)
	}
	r.advance([]outbox.Message{msg("order", "b"), msg("order", "d"), msg("order", "d"), msg("cart", "x")})
	cursor := func(typ string) string {
		types, ids := r.args()
		if i := slices.Index(types, typ); i >= 0 {
			return ids[i]
		}
		return ""
	}
	if cursor("order") != "d" || cursor("cart") != "x" {
		t.Fatalf("cursors order=%q cart=%q, want d and x", cursor("order"), cursor("cart"))
	}
	r.advance([]outbox.Message{msg("order", "e"), msg("order", "a"), msg("order", "c")}) // e, then wrapped: a, c
	if got := cursor("order"); got != "c" {
		t.Fatalf("after a wrapped claim the cursor is %q, want c (the last in rotation order)", got)
	}
	r.advance([]outbox.Message{msg("order", "f")})
	if got := cursor("order"); got != "f" || cursor("cart") != "x" {
		t.Fatalf("cursors order=%q cart=%q, want f and x (a type not claimed keeps its cursor)", got, cursor("cart"))
	}
}
