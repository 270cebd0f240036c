package relay

import (
	"fmt"
	"maps"
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
	if types, ids, _, _ := r.args(10); len(types) != 0 || len(ids) != 0 {
		t.Fatalf("a new rotation has cursors %v %v", types, ids)
	}
	r.advance([]outbox.Message{msg("order", "b"), msg("order", "d"), msg("order", "d"), msg("cart", "x")})
	cursor := func(typ string) string {
		types, ids, _, _ := r.args(10)
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

// A type that needs less than its share leaves the rest to the types that filled theirs,
// in proportion to their weights; a type that filled a limit gets more next time, one
// that took nothing gets the claim's equal share again (no limit), and every limit is at
// least one head.
func TestRotationShare(t *testing.T) {
	t.Parallel()
	heads := func(typ string, n int) []outbox.Message {
		var msgs []outbox.Message
		for i := range n {
			id := fmt.Sprint(i)
			msgs = append(msgs, outbox.Message{AggregateType: typ, AggregateID: id}, outbox.Message{AggregateType: typ, AggregateID: id}) // two events each
		}
		return msgs
	}
	limitsOf := func(r *rotation, h int) map[string]int {
		types, _, limitTypes, limits := r.args(h)
		_ = types
		out := map[string]int{}
		for i, typ := range limitTypes {
			out[typ] = limits[i]
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		msgs    []outbox.Message
		full    []string
		weights map[string]int
		heads   int
		want    map[string]int
	}{
		{
			"a flood beside a trickle: the flood gets what the trickle leaves",
			slices.Concat(heads("flood", 50), heads("quiet", 1)),
			[]string{"flood"},
			nil, 100,
			map[string]int{"flood": 98, "quiet": 2},
		},
		{
			"two floods split the heads by weight",
			slices.Concat(heads("pay", 50), heads("mail", 50)),
			[]string{"pay", "mail"},
			map[string]int{"pay": 3},
			100,
			map[string]int{"pay": 75, "mail": 25},
		},
		{
			"a type that needs less keeps room to grow, up to its weighted share",
			slices.Concat(heads("pay", 30), heads("mail", 10), heads("flood", 5)),
			[]string{"flood"},
			map[string]int{"pay": 3},
			100,
			map[string]int{"pay": 60, "mail": 20, "flood": 20},
		},
		{
			"no type filled its limit: the equal shares again, no limit",
			slices.Concat(heads("pay", 30), heads("mail", 10)), nil, nil, 100,
			map[string]int{},
		},
		{
			"a type that filled its limit with heads it could not lock is still given some",
			heads("mail", 5),
			[]string{"pay", "mail"},
			nil, 100,
			map[string]int{"pay": 50, "mail": 50},
		},
		{
			"more types than heads: at least one each",
			slices.Concat(heads("a", 1), heads("b", 1), heads("c", 1)),
			[]string{"a", "b", "c"},
			nil, 2,
			map[string]int{"a": 1, "b": 1, "c": 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r rotation
			r.share(tc.msgs, tc.full, tc.heads, tc.weights)
			if got := limitsOf(&r, tc.heads); !maps.Equal(got, tc.want) {
				t.Fatalf("limits %v, want %v", got, tc.want)
			}
		})
	}
	// A narrowed claim (half the heads) keeps the proportions.
	var r rotation
	r.share(slices.Concat(heads("flood", 50), heads("quiet", 1)), []string{"flood"}, 100, nil)
	if got := limitsOf(&r, 50); got["flood"] != 49 || got["quiet"] != 1 {
		t.Fatalf("narrowed limits %v, want flood 49, quiet 1", got)
	}
	// A type the next claim does not take loses its limit.
	r.share(heads("flood", 100), []string{"flood"}, 100, nil)
	if got := limitsOf(&r, 100); !maps.Equal(got, map[string]int{"flood": 100}) {
		t.Fatalf("limits %v after a claim of one type, want flood 100 alone", got)
	}
}
