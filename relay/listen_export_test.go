package relay

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// ListenerOptions tune a wake-up listener started by [StartListener] (tests only).
type ListenerOptions struct {
	// SelfTestTimeout replaces the default 2s.
	SelfTestTimeout time.Duration
	// DropSelfTest makes the self-test's notification vanish, as behind a
	// transaction-pooling PgBouncer: "sent" without error, never delivered.
	DropSelfTest bool
	// BeforeConnect runs before every connection attempt.
	BeforeConnect func(ctx context.Context)
	// Logger replaces the relay's.
	Logger *slog.Logger
}

// TestListener is a wake-up listener that wakes a relay, started by a test.
type TestListener struct {
	l      *listener
	cancel context.CancelFunc
	done   chan struct{}
}

// StartListener starts, for the rest of t, the wake-up listener that Run starts for r
// with Wakeup "listen", tuned by opts.
func StartListener(t testing.TB, r *Relay, opts ListenerOptions) *TestListener {
	t.Helper()
	log := r.log
	if opts.Logger != nil {
		log = opts.Logger
	}
	l := newListener(r.pool, r.cfg.Schema, r.Wake, r.notified, log)
	if opts.SelfTestTimeout > 0 {
		l.selfTestTimeout = opts.SelfTestTimeout
	}
	if opts.DropSelfTest {
		l.selfTestNotify = func(context.Context, string) error { return nil }
	}
	l.beforeConnect = opts.BeforeConnect
	ctx, cancel := context.WithCancel(context.Background())
	tl := &TestListener{l: l, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tl.done)
		l.run(ctx)
	}()
	t.Cleanup(tl.Stop)
	return tl
}

// SelfTest returns "pending", "passed" or "failed".
func (tl *TestListener) SelfTest() string {
	switch tl.l.selfTestResult() {
	case selfTestPassed:
		return "passed"
	case selfTestFailed:
		return "failed"
	default:
		return "pending"
	}
}

// Connects counts the connections that reached LISTEN.
func (tl *TestListener) Connects() int64 { return tl.l.connects.Load() }

// Notifications counts the notifications received (the self-test's excluded).
func (tl *TestListener) Notifications() int64 { return tl.l.notifications.Load() }

// Done is closed when the listener's run has returned.
func (tl *TestListener) Done() <-chan struct{} { return tl.done }

// Stop stops the listener and waits for it.
func (tl *TestListener) Stop() {
	tl.cancel()
	<-tl.done
}

// ListenerAppName is the listener connection's application_name.
const ListenerAppName = listenerAppName
