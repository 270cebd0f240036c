package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
)

type recordingObserver struct {
	mu      sync.Mutex
	reports []inbox.Report
}

func (o *recordingObserver) Processed(r inbox.Report) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reports = append(o.reports, r)
}

// last returns the last report, and how many there are.
func (o *recordingObserver) last() (inbox.Report, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.reports) == 0 {
		return inbox.Report{}, 0
	}
	return o.reports[len(o.reports)-1], len(o.reports)
}

// Config.Observer is told each call's outcome and counts — applied, duplicate, parked,
// unparked, stale, quarantined (schema, panic), replayed, a handler error, a gap refused
// under GapRetry, an invalid message — through pgx and database/sql, with the handler's
// time and the call's; the counts add up to Stats and to the rows in PostgreSQL.
func TestObserverSeesEachOutcome(t *testing.T) {
	t.Parallel()
	pool := db(t)
	sdb := sqlDB(t, pool)
	ctx := context.Background()
	obs := &recordingObserver{}
	c := newConsumer(t, &inbox.Config{Observer: obs, Accept: []inbox.Schema{{EventType: "order.changed", SchemaVersion: 1}}})
	retrying := newConsumer(t, &inbox.Config{Name: "mailer", Gap: inbox.GapRetry, Observer: obs})

	const handlerTime = 5 * time.Millisecond
	slow := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		time.Sleep(handlerTime)
		return effect(ctx, tx, m)
	}
	boom := errors.New("card processor timeout")
	failing := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		time.Sleep(handlerTime)
		return boom
	}
	panicky := func(context.Context, pgx.Tx, outbox.Message) error { panic("nil map in the pricing rule") }
	v1, v2, v3 := msg("o-1", 1), msg("o-1", 2), msg("o-1", 3)
	unaccepted := msg("o-2", 0)
	unaccepted.SchemaVersion = 2
	panicked, invalid := msg("o-3", 0), msg("o-4", 0)
	invalid.ID = [16]byte{}
	var sqlHandlerRan bool

	for _, step := range []struct {
		name string
		call func() (inbox.Result, error)
		want inbox.Report // the counts, outcome, consumer and event id; Err only as nil or not
		// handler: the report's HandlerDuration must be at least handlerTime.
		handler bool
		gap     bool // Err is a gap
	}{
		{"applied", func() (inbox.Result, error) { return c.Process(ctx, pool, v1, slow) }, inbox.Report{Outcome: inbox.Applied, Applied: 1}, true, false},
		{"duplicate", func() (inbox.Result, error) { return c.Process(ctx, pool, v1, slow) }, inbox.Report{Outcome: inbox.Duplicate, Duplicates: 1}, false, false},
		{"parked", func() (inbox.Result, error) { return c.Process(ctx, pool, v3, slow) }, inbox.Report{Outcome: inbox.Parked, Parked: 1}, false, false},
		{"applied with one unparked", func() (inbox.Result, error) { return c.Process(ctx, pool, v2, slow) }, inbox.Report{Outcome: inbox.Applied, Applied: 2, Unparked: 1}, true, false},
		{"stale", func() (inbox.Result, error) { return c.Process(ctx, pool, msg("o-1", 2), slow) }, inbox.Report{Outcome: inbox.Stale, Stale: 1}, false, false},
		{"schema quarantined", func() (inbox.Result, error) { return c.Process(ctx, pool, unaccepted, slow) }, inbox.Report{Outcome: inbox.Quarantined, Quarantined: 1}, false, false},
		{"panic quarantined", func() (inbox.Result, error) { return c.Process(ctx, pool, panicked, panicky) }, inbox.Report{Outcome: inbox.Quarantined, Quarantined: 1}, false, false},
		{"replayed", func() (inbox.Result, error) { return c.Replay(ctx, pool, panicked.ID, slow) }, inbox.Report{Outcome: inbox.Applied, Applied: 1, Replayed: 1}, true, false},
		{"handler error", func() (inbox.Result, error) { return c.Process(ctx, pool, msg("o-5", 0), failing) }, inbox.Report{Err: boom}, true, false},
		{"invalid message", func() (inbox.Result, error) { return c.Process(ctx, pool, invalid, slow) }, inbox.Report{Err: boom}, false, false},
		{"gap refused", func() (inbox.Result, error) { return retrying.Process(ctx, pool, msg("o-6", 2), slow) }, inbox.Report{Consumer: "mailer", Err: boom}, false, true},
		{"database/sql applied", func() (inbox.Result, error) {
			return c.ProcessSQL(ctx, sdb, msg("o-7", 1), func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
				time.Sleep(handlerTime)
				sqlHandlerRan = true
				return sqlEffect(ctx, tx, m)
			})
		}, inbox.Report{Outcome: inbox.Applied, Applied: 1}, true, false},
	} {
		_, before := obs.last()
		began := time.Now()
		_, callErr := step.call()
		took := time.Since(began)
		got, after := obs.last()
		if after != before+1 {
			t.Fatalf("%s: %d reports, want one", step.name, after-before)
		}
		if (got.Err != nil) != (step.want.Err != nil) || (callErr == nil) != (got.Err == nil) || errors.Is(got.Err, inbox.ErrGap) != step.gap {
			t.Fatalf("%s: report error %v, call error %v; want an error: %v, a gap: %v", step.name, got.Err, callErr, step.want.Err != nil, step.gap)
		}
		if step.want.Consumer == "" {
			step.want.Consumer = "billing"
		}
		counts := func(r inbox.Report) inbox.Report {
			return inbox.Report{
				Consumer: r.Consumer, Outcome: r.Outcome, Applied: r.Applied, Duplicates: r.Duplicates, Stale: r.Stale,
				Parked: r.Parked, Unparked: r.Unparked, Quarantined: r.Quarantined, Replayed: r.Replayed,
			}
		}
		step.want.Err = nil
		if counts(got) != step.want {
			t.Fatalf("%s: report %+v, want %+v", step.name, counts(got), step.want)
		}
		if step.handler != (got.HandlerDuration >= handlerTime) {
			t.Fatalf("%s: handler duration %s (the handler sleeps %s: want it counted %v)", step.name, got.HandlerDuration, handlerTime, step.handler)
		}
		if got.Duration < got.HandlerDuration || got.Duration > took {
			t.Fatalf("%s: duration %s, handler %s, the call took %s", step.name, got.Duration, got.HandlerDuration, took)
		}
		if step.name != "invalid message" && got.EventID == (uuid.UUID{}) {
			t.Fatalf("%s: a report without its event id: %+v", step.name, got)
		}
		if got.Outcome == inbox.Applied && (got.Lag <= 0 || got.AggregateType != "order" || got.EventType != "order.changed") {
			t.Fatalf("%s: an applied report without its lag or event: %+v", step.name, got)
		}
	}
	if !sqlHandlerRan {
		t.Fatal("the database/sql handler did not run")
	}

	// The reports add up to the counters, and to what PostgreSQL holds.
	var sum inbox.Stats
	for _, r := range obs.reports {
		if r.Consumer != c.Name() {
			continue
		}
		sum.Applied += int64(r.Applied)
		sum.Duplicates += int64(r.Duplicates)
		sum.Stale += int64(r.Stale)
		sum.Parked += int64(r.Parked)
		sum.Unparked += int64(r.Unparked)
		sum.Quarantined += int64(r.Quarantined)
		sum.Replayed += int64(r.Replayed)
		if r.Err != nil {
			sum.Errors++
		}
	}
	st := c.Stats()
	st.Lag, st.GapRetries = 0, 0
	if sum != st {
		t.Fatalf("the reports add up to %+v, Stats say %+v", sum, st)
	}
	if s := retrying.Stats(); s.GapRetries != 1 {
		t.Fatalf("GapRetry consumer stats %+v, want one gap retry", s)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects`); int64(n) != sum.Applied {
		t.Fatalf("%d effects in the database, %d applied reported", n, sum.Applied)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.inbox_quarantine WHERE consumer = 'billing'`); n != 1 {
		t.Fatalf("%d events in the quarantine, want 1 (the replayed one left it)", n)
	}
}
