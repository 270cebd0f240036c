package relay

import "testing"

func TestHeadHint(t *testing.T) {
	t.Parallel()
	var h headHint
	scope := []int{1, 2}
	const partitions = 16 // scope is 2 of them: discovery reads 8 × as many aggregates
	full := headPlan{limit: 100, full: true}
	discover := headPlan{limit: 100, full: true, discover: discoverPerHead * 100 * 8}
	if p := h.plan(scope, 100, partitions); p != discover {
		t.Fatalf("first claim: %+v, want %+v", p, discover)
	}
	h.observe(scope, discover, 100, 100) // there are 100 heads or more: walk
	if p := h.plan(scope, 100, partitions); p != full {
		t.Fatalf("no hint: %+v, want %+v", p, full)
	}
	h.observe(scope, full, 7, 70) // a deep walk ran out at 7 heads
	for i := 1; i < fullClaimEvery; i++ {
		p := h.plan(scope, 100, partitions)
		if p != (headPlan{limit: 7}) {
			t.Fatalf("claim %d: %+v, want a walk for 7 heads", i, p)
		}
		h.observe(scope, p, 7, 70)
	}
	p := h.plan(scope, 100, partitions)
	if p != discover {
		t.Fatalf("after %d claims: %+v, want %+v", fullClaimEvery, p, discover)
	}
	h.observe(scope, p, 100, 1000) // enough heads now: no hint
	if p := h.plan(scope, 100, partitions); p != full {
		t.Fatalf("hint not dropped: %+v", p)
	}
	h.observe(scope, full, 3, 30)
	if p := h.plan([]int{3}, 100, partitions); p.discover != discoverPerHead*100*16 {
		t.Fatalf("another scope: %+v, want discovery (its first claim)", p)
	}
	h.observe(scope, headPlan{limit: 3}, 2, 20) // fewer heads left: the hint shrinks
	if h.heads != 2 {
		t.Fatalf("heads %d, want 2", h.heads)
	}
	// A shallow walk (about one event per head: a trickle, not a backlog) sets no hint,
	// and drops one in force: it would cap the next batches at the few heads there were.
	h.observe(scope, headPlan{limit: 2}, 1, 1)
	if h.heads != 0 {
		t.Fatalf("a shallow walk left a hint of %d heads", h.heads)
	}
	var trickle headHint
	trickle.observe(scope, discover, 5, 5)
	if p := trickle.plan(scope, 100, partitions); p != full {
		t.Fatalf("after a shallow walk: %+v, want %+v", p, full)
	}
	// An empty claim teaches nothing: the next claim discovers, as a first one does.
	h.observe(scope, full, 0, 0)
	if p := h.plan(scope, 100, partitions); p != discover {
		t.Fatalf("after an empty claim: %+v, want %+v", p, discover)
	}
	// Without a scope (all partitions), discovery reads discoverPerHead aggregates per head.
	var all headHint
	if p := all.plan(nil, 100, partitions); p.discover != discoverPerHead*100 {
		t.Fatalf("no scope: %+v, want discovery of %d aggregates", p, discoverPerHead*100)
	}
}
