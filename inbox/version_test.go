package inbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

// S5, stale: a version at or below the last applied (a zombie relay's late re-send under
// a new id, an old event replayed) is skipped and counted.
func TestStaleVersionIsSkipped(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, nil)
	for v := int64(1); v <= 3; v++ {
		wantOutcome(t, process(t, c, pool, msg("o-1", v)), inbox.Applied)
	}
	wantOutcome(t, process(t, c, pool, msg("o-1", 2)), inbox.Stale)
	wantOutcome(t, process(t, c, pool, msg("o-1", 3)), inbox.Stale)
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("applied %v, want [1 2 3]", got)
	}
	if s := c.Stats(); s.Stale != 2 {
		t.Fatalf("stats %+v, want 2 stale", s)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE outcome = 'stale'`); n != 2 {
		t.Fatalf("%d dedup rows settled stale, want 2", n)
	}
}

// The version row never goes backwards under concurrency: versions 1..n of one
// aggregate processed by many goroutines at once, in shuffled order, under GapApply
// (each applied event moves the version to its own): every applied version is above
// the one applied before it, and the last is the highest.
func TestVersionNeverGoesBackwardsUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, &inbox.Config{Gap: inbox.GapApply})
	const n = 60
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = msg("o-1", int64(i+1))
	}
	rand.Shuffle(n, func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	work := make(chan outbox.Message)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for m := range work {
				if _, err := c.Process(context.Background(), pool, m, effect); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, m := range msgs {
		work <- m
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := versions(t, pool, "o-1")
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("version %d applied after %d: the version went backwards (applied %v)", got[i], got[i-1], got)
		}
	}
	if last := lastVersion(t, pool, "o-1"); last != n {
		t.Fatalf("last version %d, want %d", last, n)
	}
	s := c.Stats()
	if s.Applied+s.Stale != n || s.Applied != int64(len(got)) {
		t.Fatalf("stats %+v for %d events, %d applied", s, n, len(got))
	}
}

// S5, Park: versions past a gap wait in the park; the event that closes the gap applies
// them after itself, in version order, in its own transaction.
func TestGapParkThenCloseAppliesInOrder(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, nil) // GapPark is the default
	v1, v2, v3, v4, v6 := msg("o-1", 1), msg("o-1", 2), msg("o-1", 3), msg("o-1", 4), msg("o-1", 6)
	wantOutcome(t, process(t, c, pool, v1), inbox.Applied)
	wantOutcome(t, process(t, c, pool, v4), inbox.Parked)
	wantOutcome(t, process(t, c, pool, v3), inbox.Parked)
	wantOutcome(t, process(t, c, pool, v6), inbox.Parked)
	wantOutcome(t, process(t, c, pool, v3), inbox.Duplicate) // a parked event is recorded
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1}) {
		t.Fatalf("applied %v before the gap closed, want [1]", got)
	}
	res := process(t, c, pool, v2)
	wantOutcome(t, res, inbox.Applied)
	if !slices.Equal(res.Unparked, []uuid.UUID{v3.ID, v4.ID}) {
		t.Fatalf("unparked %v, want [%s %s]", res.Unparked, v3.ID, v4.ID)
	}
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("applied %v, want [1 2 3 4]", got)
	}
	if last := lastVersion(t, pool, "o-1"); last != 4 {
		t.Fatalf("last version %d, want 4", last)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox_parked`); n != 1 {
		t.Fatalf("%d events still parked, want 1 (version 6)", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE outcome = 'applied'`); n != 4 {
		t.Fatalf("%d dedup rows settled applied, want 4", n)
	}
	// The parked event kept its payload and headers.
	var payload, header string
	if err := pool.QueryRow(context.Background(), `SELECT convert_from(payload, 'UTF8'), headers->>'x-v' FROM outbox.inbox_parked`).Scan(&payload, &header); err != nil {
		t.Fatal(err)
	}
	if payload != `{"v": 6}` || header != "6" {
		t.Fatalf("parked payload %q, header %q", payload, header)
	}
	wantOutcome(t, process(t, c, pool, msg("o-1", 5)), inbox.Applied)
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("applied %v, want [1 … 6]", got)
	}
	if s := c.Stats(); s.Parked != 3 || s.Unparked != 3 || s.Applied != 6 {
		t.Fatalf("stats %+v, want 3 parked, 3 unparked, 6 applied", s)
	}
}

// S5, Park, crash-safe: the transaction that closes the gap fails while it applies a
// parked event (its connection dies): everything rolls back — the closing event is not
// recorded, the parked ones stay parked — and the redelivery applies them all, once, in
// order.
func TestGapParkCloseCrashIsSafe(t *testing.T) {
	t.Parallel()
	pool := db(t)
	ctx := context.Background()
	c := newConsumer(t, nil)
	v2, v3 := msg("o-1", 2), msg("o-1", 3)
	wantOutcome(t, process(t, c, pool, msg("o-1", 1)), inbox.Applied)
	wantOutcome(t, process(t, c, pool, v3), inbox.Parked)
	// While applying v3 (unparked by v2), the connection dies.
	crashOnV3 := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if err := effect(ctx, tx, m); err != nil {
			return err
		}
		if m.AggregateVersion == 3 {
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return err
		}
		return nil
	}
	if _, err := c.Process(ctx, pool, v2, crashOnV3); err == nil {
		t.Fatal("Process returned nil although its connection died before the commit")
	}
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1}) {
		t.Fatalf("applied %v after the crash, want [1]", got)
	}
	if lastVersion(t, pool, "o-1") != 1 || count(t, pool, `SELECT count(*) FROM outbox.inbox_parked`) != 1 ||
		count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE event_id = $1`, v2.ID) != 0 {
		t.Fatal("the crashed transaction left state behind")
	}
	res := process(t, c, pool, v2) // the redelivery
	if res.Outcome != inbox.Applied || len(res.Unparked) != 1 || res.Unparked[0] != v3.ID {
		t.Fatalf("redelivery: %+v", res)
	}
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("applied %v, want [1 2 3]", got)
	}
}

// A gap is parked also when the closing event and the parking one race: whichever
// takes the version row second sees the other's work.
func TestGapParkRacingTheClose(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, nil)
	for round := range 20 {
		agg := "race-" + string(rune('a'+round))
		wantOutcome(t, process(t, c, pool, msg(agg, 1)), inbox.Applied)
		v2, v3 := msg(agg, 2), msg(agg, 3)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, m := range []outbox.Message{v2, v3} {
			wg.Go(func() {
				<-start
				_, errs[i] = c.Process(context.Background(), pool, m, effect)
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if got := versions(t, pool, agg); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("round %d: applied %v, want [1 2 3] (an event stuck in the park?)", round, got)
		}
	}
}

// S5, Retry: an event past a gap is refused with a retryable GapError and nothing is
// recorded; delivered again after the gap closed, it applies.
func TestGapRetry(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, &inbox.Config{Gap: inbox.GapRetry})
	v3 := msg("o-1", 3)
	wantOutcome(t, process(t, c, pool, msg("o-1", 1)), inbox.Applied)
	_, err := c.Process(context.Background(), pool, v3, effect)
	var gap *inbox.GapError
	if !errors.Is(err, inbox.ErrGap) || !errors.As(err, &gap) || gap.Last != 1 || gap.Version != 3 {
		t.Fatalf("err = %v, want a GapError at 1 for 3", err)
	}
	if count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE event_id = $1`, v3.ID) != 0 {
		t.Fatal("a refused event was recorded: its redelivery would be a duplicate")
	}
	wantOutcome(t, process(t, c, pool, msg("o-1", 2)), inbox.Applied)
	wantOutcome(t, process(t, c, pool, v3), inbox.Applied)
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("applied %v", got)
	}
	if s := c.Stats(); s.GapRetries != 1 {
		t.Fatalf("stats %+v, want 1 gap retry", s)
	}
}

// S5, Apply: an event past a gap is applied and moves the version; the missing versions
// are then stale.
func TestGapApply(t *testing.T) {
	t.Parallel()
	pool := db(t)
	c := newConsumer(t, &inbox.Config{Gap: inbox.GapApply})
	wantOutcome(t, process(t, c, pool, msg("o-1", 1)), inbox.Applied)
	wantOutcome(t, process(t, c, pool, msg("o-1", 3)), inbox.Applied)
	wantOutcome(t, process(t, c, pool, msg("o-1", 2)), inbox.Stale)
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("applied %v, want [1 3]", got)
	}
}

// The first version seen: with FirstVersionOne (the default) an unseen aggregate is at
// 0, so version 5 first is a gap; with FirstVersionAny it is the starting point.
func TestFirstVersion(t *testing.T) {
	t.Parallel()
	pool := db(t)
	one := newConsumer(t, &inbox.Config{Name: "one"})
	wantOutcome(t, process(t, one, pool, msg("o-1", 5)), inbox.Parked)
	anyFirst := newConsumer(t, &inbox.Config{Name: "any", FirstVersion: inbox.FirstVersionAny})
	wantOutcome(t, process(t, anyFirst, pool, msg("o-2", 5)), inbox.Applied)
	wantOutcome(t, process(t, anyFirst, pool, msg("o-2", 4)), inbox.Stale)
	wantOutcome(t, process(t, anyFirst, pool, msg("o-2", 6)), inbox.Applied)
}
