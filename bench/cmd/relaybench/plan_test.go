package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const samplePlan = `Sort  (cost=941068.42..941068.45 rows=10 width=199) (actual time=478.351..478.472 rows=2000 loops=1)
  Sort Key: pk.rn, e.seq
  Buffers: shared hit=19615 read=12
  CTE heads
    ->  Limit  (cost=0.42..938963.42 rows=5 width=19) (actual time=454.752..459.201 rows=200 loops=1)
          ->  Index Scan using events_pending on events h  (cost=0.42..938963.42 rows=5 width=19) (actual time=0.347..4.774 rows=200 loops=1)
                Rows Removed by Filter: 150
                SubPlan 2
                  ->  Index Only Scan using events_pending_aggregate on events p  (cost=0.42..12.92 rows=200 width=8) (actual time=0.020..0.020 rows=1 loops=200)
  CTE fence
    ->  Seq Scan on leases l  (cost=0.00..20.62 rows=4 width=18) (never executed)
  ->  Index Scan using events_pending on events x  (cost=0.42..8.45 rows=1 width=200) (actual time=0.002..0.002 rows=1 loops=2000)
        Rows Removed by Filter: 3
Planning Time: 1.800 ms
JIT:
  Functions: 65
  Timing: Generation 2.501 ms, Inlining 62.866 ms, Optimization 215.200 ms, Emission 176.415 ms, Total 456.983 ms
Execution Time: 505.555 ms`

func TestSummarizePlan(t *testing.T) {
	s := summarizePlan(strings.Split(samplePlan, "\n"))
	want := planSummary{
		root: "Sort", rows: 2000, removed: 6150, sharedHit: 19615, sharedRead: 12, execMS: 505.555, jit: 456.983,
		scans: []string{"Index Scan using events_pending on events", "Index Only Scan using events_pending_aggregate on events", "Seq Scan on leases"},
	}
	if s.root != want.root || s.rows != want.rows || s.removed != want.removed || s.sharedHit != want.sharedHit ||
		s.sharedRead != want.sharedRead || s.execMS != want.execMS || s.jit != want.jit || !slices.Equal(s.scans, want.scans) {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
}

func TestPercentile(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, ms(i))
	}
	for _, tc := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 50, 0},
		{[]time.Duration{ms(7)}, 99, ms(7)},
		{hundred, 50, ms(50)},
		{hundred, 95, ms(95)},
		{hundred, 99, ms(99)},
		{hundred, 100, ms(100)},
		{hundred, 0.1, ms(1)},
		{[]time.Duration{ms(1), ms(2), ms(3)}, 50, ms(2)},
		{[]time.Duration{ms(1), ms(2), ms(3)}, 99, ms(3)},
	} {
		if got := percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("percentile(%d values, %v) = %v, want %v", len(tc.sorted), tc.p, got, tc.want)
		}
	}
}
