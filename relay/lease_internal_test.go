package relay

import "testing"

// The claim selects a relay partition's events by the range partitionRange gives; the
// settle statement fences a row by `partition * N / 4096` (relayPartitionOf). The two
// must agree for every partition count, or a mark could be checked against the wrong lease.
func TestPartitionRangesMatchTheSettleMapping(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 7, 16, 100, 1000, 4095, 4096} {
		covered := 0
		for i := range n {
			lo, hi := partitionRange(i, n)
			for ep := lo; ep <= hi; ep++ {
				if got := relayPartitionOf(ep, n); got != i {
					t.Fatalf("n=%d: event partition %d is in range %d [%d, %d] but maps to %d", n, ep, i, lo, hi, got)
				}
				covered++
			}
		}
		if covered != 4096 {
			t.Fatalf("n=%d: ranges cover %d event partitions, want 4096", n, covered)
		}
	}
}
