package outboxadmin

import (
	"testing"
	"time"
)

// The rates come from two samples: what was written since the previous one, minus the
// growth of the backlog and of the dead letters, left the backlog; samples closer than a
// second apart are not recorded.
func TestHistoryRates(t *testing.T) {
	t.Parallel()
	var h history
	t0 := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	first := Status{At: t0, Pending: 100, Dead: 2, MaxSeq: 1000}
	h.add(&first, 0)
	if first.PublishedPerSecond != 0 || len(first.History) != 1 || h.maxSeq() != 1000 {
		t.Fatalf("first sample: %+v", first)
	}
	// 10 s later: 50 written, the backlog down by 30, 5 more dead → 75 left published: 7.5/s.
	second := Status{At: t0.Add(10 * time.Second), Pending: 70, Dead: 7, MaxSeq: 1050}
	h.add(&second, 50)
	if second.PublishedPerSecond != 7.5 || second.DeadPerSecond != 0.5 || len(second.History) != 2 {
		t.Fatalf("second sample: published %v/s dead %v/s, %d samples", second.PublishedPerSecond, second.DeadPerSecond, len(second.History))
	}
	soon := Status{At: t0.Add(10*time.Second + 300*time.Millisecond), Pending: 1, MaxSeq: 1051}
	h.add(&soon, 1)
	if len(soon.History) != 2 || soon.PublishedPerSecond != 7.5 || h.maxSeq() != 1050 {
		t.Fatalf("a sample 300 ms later was recorded: %+v", soon)
	}
	for i := range 2 * historyLen {
		s := Status{At: t0.Add(time.Duration(20+i) * time.Second), MaxSeq: 1050}
		h.add(&s, 0)
	}
	if n := len(h.samples); n != historyLen {
		t.Fatalf("%d samples kept, want %d", n, historyLen)
	}
}
