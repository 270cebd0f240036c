package inbox

import "hash/fnv"

// Shard maps an aggregate to one of n workers (0 ≤ Shard < n), the same one for every
// event of the aggregate: a runner that gives each worker its own queue processes an
// aggregate's events one after another, in the order they came, and different
// aggregates in parallel. n must be at least 1.
func Shard(aggregateType, aggregateID string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(aggregateType))
	_, _ = h.Write([]byte{0x1f}) // so that ("ab", "c") and ("a", "bc") differ
	_, _ = h.Write([]byte(aggregateID))
	return int(h.Sum32() % uint32(n)) //nolint:gosec // n is a worker count, far below 2³¹
}
