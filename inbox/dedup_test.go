package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// A second delivery of an event (the broker redelivers; the consumer crashed after the
// commit and before the ack) is skipped: one effect.
func TestDuplicateDeliveryIsSkipped(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, nil)
	m := msg("o-1", 0)
	wantOutcome(t, process(t, c, pool, m), inbox.Applied)
	// The consumer "crashes" here, before its ack: the broker delivers m again.
	wantOutcome(t, process(t, c, pool, m), inbox.Duplicate)
	wantOutcome(t, process(t, c, pool, m), inbox.Duplicate)
	if n := effectsOf(t, pool, m.ID); n != 1 {
		t.Fatalf("%d effects of one event delivered three times, want 1", n)
	}
	if s := c.Stats(); s.Applied != 1 || s.Duplicates != 2 || s.Lag <= 0 || s.Lag > time.Minute {
		t.Fatalf("stats %+v, want 1 applied, 2 duplicates and the lag of an event just made", s)
	}
	// Another consumer of the same event is another dedup space.
	other := newConsumer(t, &inbox.Config{Name: "shipping"})
	wantOutcome(t, process(t, other, pool, m), inbox.Applied)
}

// S4: the same event delivered to two consumer instances at the same time — both
// transactions open at once — has its effect once: the second waits on the first's
// uncommitted dedup row, and once the first commits it is a duplicate.
func TestConcurrentDuplicatesHaveOneEffect(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, nil)
	m := msg("o-1", 1)

	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback(ctx) }()
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback(ctx) }()
	var pid2 uint32
	if err := tx2.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid2); err != nil {
		t.Fatal(err)
	}

	res1, err := c.Process(ctx, tx1, m, effect) // applied in tx1, not committed
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, res1, inbox.Applied)
	var res2 inbox.Result
	var err2 error
	var wg sync.WaitGroup
	wg.Go(func() { res2, err2 = c.Process(ctx, tx2, m, effect) })
	// The barrier: instance 2 is inside Process, blocked on instance 1's open transaction.
	waitFor(t, "the second transaction to wait on the first's lock", func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid2) == 1
	})
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err2 != nil {
		t.Fatal(err2)
	}
	wantOutcome(t, res2, inbox.Duplicate)
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := effectsOf(t, pool, m.ID); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// Many instances racing on one event, on the pool: one effect, the rest duplicates.
func TestManyConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, nil)
	m := msg("o-1", 0)
	const n = 8
	start := make(chan struct{})
	outcomes := make([]inbox.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := c.Process(context.Background(), pool, m, effect)
			outcomes[i], errs[i] = res.Outcome, err
		})
	}
	close(start)
	wg.Wait()
	applied := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if outcomes[i] == inbox.Applied {
			applied++
		}
	}
	if applied != 1 || effectsOf(t, pool, m.ID) != 1 {
		t.Fatalf("%d applied, %d effects; want 1 and 1", applied, effectsOf(t, pool, m.ID))
	}
}

// A crash between the handler and the commit (the connection dies while the
// transaction is open) rolls everything back: nothing is recorded, so the redelivery
// applies the event, once.
func TestCrashBetweenHandlerAndCommit(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, nil)
	m := msg("o-1", 1)
	pids := make(chan uint32, 1)
	release := make(chan struct{})
	crashing := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		var pid uint32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		pids <- pid
		<-release // the effect is written; the commit has not happened
		return nil
	}
	done := make(chan error, 1)
	go func() { _, err := c.Process(ctx, pool, m, crashing); done <- err }()
	pid := <-pids
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the consumer's backend to end", func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid) == 0
	})
	close(release)
	if err := <-done; err == nil {
		t.Fatal("Process returned nil although its connection was killed before the commit")
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox`); n != 0 {
		t.Fatalf("%d dedup rows after the crash, want 0", n)
	}
	if n := effectsOf(t, pool, m.ID); n != 0 {
		t.Fatalf("%d effects after the crash, want 0", n)
	}
	wantOutcome(t, process(t, c, pool, m), inbox.Applied) // the redelivery
	wantOutcome(t, process(t, c, pool, m), inbox.Duplicate)
	if n := effectsOf(t, pool, m.ID); n != 1 {
		t.Fatalf("%d effects after the redelivery, want 1", n)
	}
}

// A transient handler error rolls everything back and is returned: redelivery applies.
func TestTransientHandlerErrorRecordsNothing(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, nil)
	m := msg("o-1", 1)
	boom := errors.New("downstream timeout")
	_, err := c.Process(context.Background(), pool, m, func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the handler's", err)
	}
	if effectsOf(t, pool, m.ID) != 0 || count(t, pool, `SELECT count(*) FROM outbox.inbox`) != 0 {
		t.Fatal("a failed handler left its effect or a dedup row")
	}
	wantOutcome(t, process(t, c, pool, m), inbox.Applied)
	if s := c.Stats(); s.Errors != 1 || s.Applied != 1 {
		t.Fatalf("stats %+v", s)
	}
}
