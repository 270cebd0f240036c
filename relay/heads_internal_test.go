package relay

import "testing"

func TestHeadHint(t *testing.T) {
	t.Parallel()
	var h headHint
	scope := []int{1, 2}
	if n, full := h.limit(scope, 100); n != 100 || !full {
		t.Fatalf("no hint: limit %d full %v, want 100 true", n, full)
	}
	h.observe(scope, 100, 7, 70, true) // a deep walk ran out at 7 heads
	for i := 1; i < fullWalkEvery; i++ {
		if n, full := h.limit(scope, 100); n != 7 || full {
			t.Fatalf("claim %d: limit %d full %v, want 7 false", i, n, full)
		}
		h.observe(scope, 7, 7, 70, false)
	}
	if n, full := h.limit(scope, 100); n != 100 || !full {
		t.Fatalf("after %d claims: limit %d full %v, want a full walk", fullWalkEvery, n, full)
	}
	h.observe(scope, 100, 100, 1000, true) // enough heads now: no hint
	if n, full := h.limit(scope, 100); n != 100 || !full {
		t.Fatalf("hint not dropped: limit %d full %v", n, full)
	}
	h.observe(scope, 100, 3, 30, true)
	if n, _ := h.limit([]int{3}, 100); n != 100 {
		t.Fatalf("another scope used the hint: limit %d", n)
	}
	h.observe(scope, 3, 2, 20, false) // fewer heads left: the hint shrinks
	if h.heads != 2 {
		t.Fatalf("heads %d, want 2", h.heads)
	}
	// A shallow walk (about one event per head: a trickle, not a backlog) sets no hint,
	// and drops one in force: it would cap the next batches at the few heads there were.
	h.observe(scope, 2, 1, 1, false)
	if h.heads != 0 {
		t.Fatalf("a shallow walk left a hint of %d heads", h.heads)
	}
	var trickle headHint
	trickle.observe(scope, 100, 5, 5, true)
	if n, full := trickle.limit(scope, 100); n != 100 || !full {
		t.Fatalf("after a shallow walk: limit %d full %v, want 100 true", n, full)
	}
}
