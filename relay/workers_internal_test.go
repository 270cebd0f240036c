package relay

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A worker that went idle while its relay ran two batches at once, and must wait now
// that another relay shares the default Concurrency, passes on a wake-up it takes: the
// worker that still runs batches gets it, instead of sleeping through it until its next
// poll (a drain of four such relays once waited a minute for it).
func TestWaitingWorkerPassesWakeUpOn(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.ConnString(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	batches := &batchCounter{}
	cfg.ConnConfig.Tracer = batches
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r, err := New(pool, &memsink.Sink{}, &Config{Mode: Unordered, Wakeup: WakeupPoll, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Stats().Workers; got != 2 {
		t.Fatalf("Workers = %d before any heartbeat, want 2 (the default, alone)", got)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.work(ctx, ctx, 1) }() // the second worker alone
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("work: %v", err)
		}
	}()
	// Its first claim finds nothing: the worker idles until woken. Once it stands in
	// that wait, a wake-up goes to it, not into the channel's buffer, so what the
	// channel holds afterwards is what the worker passed on.
	if !poll(10*time.Second, idleWorker) {
		t.Fatal("the worker never went idle")
	}

	r.leases.members.Store(2) // a heartbeat found another relay: this worker must wait
	r.Wake()                  // taken by the idle worker, the only one listening
	if !poll(10*time.Second, func() bool { return len(r.wake.shared) > 0 }) {
		t.Fatal("the waiting worker kept the wake-up: the worker that runs batches would sleep through it")
	}
	if n := batches.n.Load(); n != 1 {
		t.Fatalf("%d claims, want 1: a waiting worker must not claim", n)
	}
}

// idleWorker reports whether the worker this test started stands in wait, as a worker
// that waits for a wake-up does (nothing signals it; other tests' relays run beside).
func idleWorker() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, frames, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[select") && strings.HasPrefix(frames, "github.com/outboxkit/outbox/relay.wait(") &&
			strings.Contains(frames, "relay.TestWaitingWorkerPassesWakeUpOn.func") {
			return true
		}
	}
	return false
}

// poll reports whether cond held within timeout, looking every 5 ms.
func poll(timeout time.Duration, cond func() bool) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(timeout); !cond(); <-tick.C {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// batchCounter counts the batches (claims) a pool sends.
type batchCounter struct{ n atomic.Int64 }

func (c *batchCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*batchCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*batchCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (*batchCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (*batchCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// With lanes (Config.IsolatedTypes) a worker waits out its own lane's claim cooldown, not
// the other lane's: a rate-limited flood's claims, each of which caught up (ADR 0040),
// kept the other types' worker waiting half a cooldown for every event (the isolation
// benchmark's quiet p50 went from 3.9 to 2.9 ms).
func TestCooldownIsTheLanes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	r, err := New(pool, &memsink.Sink{}, &Config{
		Concurrency: 2, IsolatedTypes: []string{"bulk"}, ClaimCooldown: time.Second, Wakeup: WakeupPoll, PollInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	r.lastCaughtUp.Store(now)
	r.caughtUp[0].Store(now) // worker 0, the isolated types' lane, caught up just now
	start := time.Now()
	r.coolDown(t.Context(), 1) // the other types' lane
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("the other types' worker waited %s for the isolated lane's cooldown", d)
	}
	start = time.Now()
	r.coolDown(t.Context(), 0)
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("the isolated types' worker waited %s, not its own lane's cooldown (1s)", d)
	}
}
