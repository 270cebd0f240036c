package relay

import (
	"context"
	"time"
)

// wait waits d, or until ctx is done, or until wake (nil: never) receives. It reports
// whether it ended early (woken or cancelled). Every background loop of the relay waits
// through it.
func wait(ctx context.Context, d time.Duration, wake <-chan struct{}) (early bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return false
	case <-wake:
		return true
	}
}

// signal sends on c without blocking; signals coalesce.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// wakeups tells idle workers to look for work now. Unordered workers all claim from the
// whole table, so one of them is enough: a wake-up goes to whichever waits (shared). An
// ordered relay deals its partitions out among its workers (leaseKeeper.claimable), so a
// wake-up goes to each of them: the one it reached may have nothing in its share while
// another has the work.
type wakeups struct {
	shared chan struct{}
	own    []chan struct{} // per worker; nil: shared
}

func newWakeups(workers int, perWorker bool) *wakeups {
	w := &wakeups{shared: make(chan struct{}, 1)}
	if perWorker {
		for range workers {
			w.own = append(w.own, make(chan struct{}, 1))
		}
	}
	return w
}

// signal wakes an idle worker, or every worker when each has its own share.
func (w *wakeups) signal() {
	if w.own == nil {
		signal(w.shared)
		return
	}
	for _, c := range w.own {
		signal(c)
	}
}

// of is the channel worker waits on.
func (w *wakeups) of(worker int) chan struct{} {
	if w.own == nil {
		return w.shared
	}
	return w.own[worker]
}
