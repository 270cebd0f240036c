package relay

import "sync/atomic"

// claimSizes remember, per worker, how many rows its last claim returned, so the next
// claim's rows are read into slices of about that size. Sized for the most a claim may
// return (MaxBatchEvents: 1,000 messages, 224 KB by default), they were allocated and
// cleared for every claim of a relay following a flood with claims of a few dozen rows,
// and the garbage collector ran for them; grown from nothing, a drain's full claims
// spent a tenth of the relay's CPU growing them.
type claimSizes []atomic.Int32

func newClaimSizes(workers int) claimSizes { return make(claimSizes, max(1, workers)) }

// minClaimSize is the smallest size hint: a claim's first rows never grow the slices.
const minClaimSize = 16

// hint returns the size to read worker's next claim into: half as much again as its last
// claim returned, at least minClaimSize, at most capacity (the most the claim returns).
func (s claimSizes) hint(worker, capacity int) int {
	last := int(s[min(worker, len(s)-1)].Load())
	return min(capacity, max(minClaimSize, last+last/2))
}

// note records that worker's claim returned rows rows.
func (s claimSizes) note(worker, rows int) {
	s[min(worker, len(s)-1)].Store(int32(min(rows, 1<<30)))
}
