package relay

import (
	"context"
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
	deadline := time.Now().Add(10 * time.Second)
	for batches.n.Load() == 0 && time.Now().Before(deadline) { // its first claim (empty)
		time.Sleep(5 * time.Millisecond) //nolint:forbidigo // polling a counter with a deadline
	}
	if batches.n.Load() == 0 {
		t.Fatal("the worker never claimed")
	}
	time.Sleep(200 * time.Millisecond) //nolint:forbidigo // the claim returns; the worker idles until woken

	r.leases.members.Store(2) // a heartbeat found another relay: this worker must wait
	r.Wake()                  // taken by the idle worker, the only one listening
	for len(r.wake) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) //nolint:forbidigo // polling a channel with a deadline
	}
	if len(r.wake) == 0 {
		t.Fatal("the waiting worker kept the wake-up: the worker that runs batches would sleep through it")
	}
	if n := batches.n.Load(); n != 1 {
		t.Fatalf("%d claims, want 1: a waiting worker must not claim", n)
	}
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
