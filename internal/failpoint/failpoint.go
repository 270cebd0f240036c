// Package failpoint provides named hooks in the relay's code that tests can arm to
// inject a fault at an exact step (a crash between publish and mark, say). Unarmed —
// always, in production — a hook costs one atomic load.
package failpoint

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Names of the relay's failpoints, in the order a batch passes them.
const (
	// AfterClaim fires after a batch is claimed (rows locked, marked published in the
	// open transaction), before it is published.
	AfterClaim = "relay/after-claim"
	// AfterPublish fires after the sink returned, before its acks are looked at: the
	// broker has the messages, the relay never saw its answer.
	AfterPublish = "relay/after-publish"
	// BeforeMark fires after the acks are sorted into outcomes, before the round trip
	// that writes them (the put-back of what was not published, the lease check) and
	// commits. A crash inside that round trip is injected by tests from the database's
	// side (a deferred trigger that stalls the COMMIT, and pg_terminate_backend).
	BeforeMark = "relay/before-mark"
)

// ErrCrash is what an armed failpoint usually returns: the relay treats it like its
// process dying at that step — it abandons the batch (the claim transaction rolls back,
// as it would when the connection drops) and Run returns the error.
var ErrCrash = errors.New("failpoint: simulated crash")

var (
	armed atomic.Int32
	mu    sync.Mutex
	hooks = map[string]func() error{}
)

// Arm makes Inject(name) call fn until the returned disarm is called.
func Arm(name string, fn func() error) (disarm func()) {
	mu.Lock()
	defer mu.Unlock()
	if _, ok := hooks[name]; !ok {
		armed.Add(1)
	}
	hooks[name] = fn
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := hooks[name]; ok {
			delete(hooks, name)
			armed.Add(-1)
		}
	}
}

// Inject runs the hook armed at name, if any, and returns its error.
func Inject(name string) error {
	if armed.Load() == 0 {
		return nil
	}
	mu.Lock()
	fn := hooks[name]
	mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn()
}
