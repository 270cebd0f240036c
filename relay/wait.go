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
