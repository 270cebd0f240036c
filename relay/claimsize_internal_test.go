package relay

import "testing"

func TestClaimSizesHint(t *testing.T) {
	t.Parallel()
	s := newClaimSizes(2)
	for _, c := range []struct {
		worker, rows, capacity, want int
		what                         string
	}{
		{0, -1, 1000, minClaimSize, "a worker's first claim"},
		{0, 25, 1000, 37, "after a claim of 25 rows: half as much again"},
		{1, -1, 1000, minClaimSize, "another worker's sizes are its own"},
		{0, 1000, 1000, 1000, "after a full claim: the capacity, no more"},
		{0, 0, 1000, minClaimSize, "after an empty claim"},
		{5, 40, 1000, 60, "a worker index past the workers shares the last one's"},
		{1, -1, 1000, 60, "which is the last one's"},
		{0, 500, 100, 100, "never past the capacity"},
	} {
		if c.rows >= 0 {
			s.note(c.worker, c.rows)
		}
		if got := s.hint(c.worker, c.capacity); got != c.want {
			t.Errorf("%s: hint(%d, %d) = %d, want %d", c.what, c.worker, c.capacity, got, c.want)
		}
	}
}
