package relay

import (
	"sync"
	"time"
)

// breaker keeps the relay off a sink that is down: while open, no batch is claimed
// (so the database is not hammered either); after the delay one batch probes, and its
// outcome closes the breaker or reopens it with a doubled delay.
type breaker struct {
	mu        sync.Mutex
	openUntil time.Time // zero: closed
	delay     time.Duration
	probing   bool
	initial   time.Duration
	max       time.Duration
}

// until returns until when the breaker is open; zero when closed.
func (b *breaker) until() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openUntil
}

func newBreaker(initial, maxDelay time.Duration) *breaker {
	return &breaker{initial: initial, max: maxDelay, delay: initial}
}

// acquire says whether a batch may run now; if not, how long to wait before asking again.
func (b *breaker) acquire(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true, 0
	case now.Before(b.openUntil):
		return false, b.openUntil.Sub(now)
	case b.probing:
		return false, b.initial / 10
	}
	b.probing = true
	return true, 0
}

// success closes the breaker.
func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.openUntil, b.delay, b.probing = time.Time{}, b.initial, false
}

// down opens the breaker (again) and reports whether it was closed before.
func (b *breaker) down(now time.Time) (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	opened = b.openUntil.IsZero()
	if opened {
		b.delay = b.initial
	} else if b.probing {
		b.delay = min(2*b.delay, b.max)
	}
	b.openUntil, b.probing = now.Add(b.delay), false
	return opened
}

// inconclusive ends a probe that decided nothing (no work found).
func (b *breaker) inconclusive() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// open reports whether the breaker is open or probing: the sink was last seen down.
func (b *breaker) open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero()
}
