package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func sqlEffect(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (consumer, event_id, aggregate_id, version) VALUES ('billing', $1, $2, $3)`,
		m.ID, m.AggregateID, m.AggregateVersion)
	return err
}

func sqlDB(t *testing.T, pool *pgxpool.Pool) *sql.DB {
	t.Helper()
	sdb := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = sdb.Close() })
	return sdb
}

// database/sql: dedup, park and unpark, quarantine, the same as pgx.
func TestProcessSQL(t *testing.T) {
	t.Parallel()
	pool := db(t)
	sdb := sqlDB(t, pool)
	ctx := context.Background()
	c := newConsumer(t, nil)
	v1, v2, v3 := msg("o-1", 1), msg("o-1", 2), msg("o-1", 3)
	for _, step := range []struct {
		m    outbox.Message
		want inbox.Outcome
	}{{v1, inbox.Applied}, {v1, inbox.Duplicate}, {v3, inbox.Parked}, {v2, inbox.Applied}, {v2, inbox.Duplicate}} {
		res, err := c.ProcessSQL(ctx, sdb, step.m, sqlEffect)
		if err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, res, step.want)
	}
	if got := versions(t, pool, "o-1"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("applied %v, want [1 2 3]", got)
	}
	res, err := c.ProcessSQL(ctx, sdb, msg("o-2", 0), func(context.Context, *sql.Tx, outbox.Message) error {
		return outbox.Permanent(errors.New("no such customer"))
	})
	if err != nil || res.Outcome != inbox.Quarantined {
		t.Fatalf("%+v, %v", res, err)
	}
	boom := errors.New("boom")
	m := msg("o-3", 0)
	if _, err := c.ProcessSQL(ctx, sdb, m, func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		_ = sqlEffect(ctx, tx, m)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if effectsOf(t, pool, m.ID) != 0 || count(t, pool, `SELECT count(*) FROM outbox.inbox WHERE event_id = $1`, m.ID) != 0 {
		t.Fatal("a failed handler left state")
	}
}

// ProcessSQLTx works inside the caller's transaction; a failure rolls back its savepoint
// only, so the caller's own work and transaction survive.
func TestProcessSQLTx(t *testing.T) {
	t.Parallel()
	pool := db(t)
	sdb := sqlDB(t, pool)
	ctx := context.Background()
	c := newConsumer(t, nil)
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	m := msg("o-1", 0)
	if _, err := c.ProcessSQLTx(ctx, tx, msg("o-2", 0), func(context.Context, *sql.Tx, outbox.Message) error {
		return errors.New("transient")
	}); err == nil {
		t.Fatal("want the handler's error")
	}
	res, err := c.ProcessSQLTx(ctx, tx, m, sqlEffect) // the transaction is still usable
	if err != nil || res.Outcome != inbox.Applied {
		t.Fatalf("%+v, %v", res, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if effectsOf(t, pool, m.ID) != 1 || count(t, pool, `SELECT count(*) FROM outbox.inbox`) != 1 {
		t.Fatal("want one effect and one dedup row")
	}
}

// A consumer-only database (the inbox set alone, no outbox tables) processes messages.
func TestInboxWithoutOutboxTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	m, err := outboxmigrate.New(&outboxmigrate.Config{Sets: []outboxmigrate.Set{outboxmigrate.SetInbox}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if count(t, pool, `SELECT count(*) FROM pg_tables WHERE schemaname = 'outbox' AND tablename = 'events'`) != 0 {
		t.Fatal("the inbox set created the events table")
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (n bigserial, consumer text, event_id uuid, aggregate_id text, version bigint)`); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, nil)
	wantOutcome(t, process(t, c, pool, msg("o-1", 2)), inbox.Parked)
	res := process(t, c, pool, msg("o-1", 1))
	if res.Outcome != inbox.Applied || len(res.Unparked) != 1 {
		t.Fatalf("%+v", res)
	}
}
