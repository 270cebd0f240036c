package relay

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
)

// The buckets' arithmetic, on a clock of the test's: a bucket holds a tenth of a second
// of the relay's part of the rate, caps the heads at what it holds, is left out of the
// claims while in debt, and is full again when refilled says.
func TestTypeRatesArithmetic(t *testing.T) {
	t.Parallel()
	r := newTypeRates(map[string]float64{"bulk": 1000})
	now := time.Unix(1000, 0)
	// two relays: 500 a second each, a bucket of 50, 10 events a head: 5 heads
	if a := r.allowance(now, 2, 10); len(a.skip) != 0 || !slices.Equal(a.capTypes, []string{"bulk"}) || !slices.Equal(a.caps, []int{5}) {
		t.Fatalf("a full bucket: %+v, want bulk capped at 5 heads", a)
	}
	bulk := func(n int) []outbox.Message {
		return slices.Repeat([]outbox.Message{{AggregateType: "bulk"}}, n)
	}
	r.took(append(bulk(60), outbox.Message{AggregateType: "other"})) // 10 more than it held
	if a := r.allowance(now, 2, 10); !slices.Equal(a.skip, []string{"bulk"}) || len(a.capTypes) != 0 {
		t.Fatalf("in debt: %+v, want bulk left out", a)
	}
	// 10 in debt, a bucket of 50 at 500 a second: full again in 120 ms
	if got := r.refilled([]string{"bulk"}, 2, now); got.Sub(now) != 120*time.Millisecond {
		t.Errorf("refilled in %s, want 120ms", got.Sub(now))
	}
	// 30 ms later: 5 tokens, one head at least
	if a := r.allowance(now.Add(30*time.Millisecond), 2, 10); !slices.Equal(a.caps, []int{1}) {
		t.Errorf("5 tokens: %+v, want one head", a)
	}
	// a second later the bucket holds no more than its size, and one relay gets it all
	if a := r.allowance(now.Add(time.Second), 1, 10); !slices.Equal(a.caps, []int{10}) {
		t.Errorf("one relay, a full bucket of 100: %+v, want 10 heads", a)
	}
	// a type taken to its cap is bound: the claim is not full for it
	a := rateAllowance{capTypes: []string{"bulk"}, caps: []int{2}}
	msgs := []outbox.Message{{AggregateType: "bulk", AggregateID: "a"}, {AggregateType: "bulk", AggregateID: "a"}, {AggregateType: "bulk", AggregateID: "b"}}
	if got := a.bound(msgs); !slices.Equal(got, []string{"bulk"}) {
		t.Errorf("2 heads of a cap of 2: bound %v, want bulk", got)
	}
	if got := a.bound(msgs[:2]); len(got) != 0 {
		t.Errorf("1 head of a cap of 2: bound %v, want none", got)
	}
	var none *typeRates
	if a := none.allowance(now, 1, 10); len(a.skip)+len(a.capTypes) != 0 {
		t.Errorf("no rates: %+v", a)
	}
}
