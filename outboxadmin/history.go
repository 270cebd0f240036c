package outboxadmin

import (
	"sync"
	"time"
)

// historyLen is how many samples the overview keeps.
const historyLen = 120

// history keeps the handler's recent status samples, taken when a status is asked for
// (the dashboard's refresh drives it) and at most one a second. Rates come from two
// samples: events written since the previous one (a primary-key range count) minus the
// growth of the backlog and of the dead letters is what left the backlog published (or
// discarded: an estimate, documented as one).
type history struct {
	mu      sync.Mutex
	last    *Status
	samples []Sample
}

// maxSeq is the max seq of the previous sample, 0 before the first.
func (h *history) maxSeq() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		return 0
	}
	return h.last.MaxSeq
}

// add records st (written events after the previous sample's max seq), fills in its rates
// and history, and reports the samples.
func (h *history) add(st *Status, written int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev := h.last; prev != nil {
		dt := st.At.Sub(prev.At)
		if dt < time.Second {
			st.PublishedPerSecond, st.DeadPerSecond = prev.PublishedPerSecond, prev.DeadPerSecond
			st.History = append([]Sample(nil), h.samples...)
			return
		}
		left := written - (st.Pending - prev.Pending) - (st.Dead - prev.Dead)
		st.PublishedPerSecond = max(0, float64(left)/dt.Seconds())
		st.DeadPerSecond = max(0, float64(st.Dead-prev.Dead)/dt.Seconds())
	}
	c := *st
	h.last = &c
	h.samples = append(h.samples, Sample{
		At: st.At, Pending: st.Pending, Dead: st.Dead,
		OldestPendingSeconds: st.OldestPendingSeconds, PublishedPerSecond: st.PublishedPerSecond,
	})
	if len(h.samples) > historyLen {
		h.samples = h.samples[len(h.samples)-historyLen:]
	}
	st.History = append([]Sample(nil), h.samples...)
}
