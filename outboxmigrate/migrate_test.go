package outboxmigrate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxmigrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func emptyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.PoolFor(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
}

func TestMigrateConcurrentlyAndRerun(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	ctx := context.Background()
	m, err := outboxmigrate.New(&outboxmigrate.Config{Schema: "shop_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	results := make([]outboxmigrate.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = m.Migrate(ctx, pool) })
	}
	wg.Wait()
	applied := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		if results[i].Version != m.Latest() {
			t.Fatalf("migrator %d: version %d, want %d", i, results[i].Version, m.Latest())
		}
		applied += len(results[i].Applied)
	}
	if applied != m.Latest() {
		t.Fatalf("%d migrations applied in all, want %d (each exactly once)", applied, m.Latest())
	}
	res, err := m.Migrate(ctx, pool)
	if err != nil || len(res.Applied) != 0 {
		t.Fatalf("re-run: %+v, %v; want nothing applied", res, err)
	}
	v, err := m.Version(ctx, pool)
	if err != nil || v != m.Latest() {
		t.Fatalf("Version = %d, %v", v, err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'shop_outbox'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables < 6 {
		t.Fatalf("%d tables in shop_outbox", tables)
	}
}

func TestVersionOfUnmigratedDatabaseIsZero(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	m, err := outboxmigrate.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := m.Version(context.Background(), pool); err != nil || v != 0 {
		t.Fatalf("Version = %d, %v; want 0", v, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	ctx := context.Background()
	m, err := outboxmigrate.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox.schema_migrations (version, name) VALUES (999, 'future')`); err != nil {
		t.Fatal(err)
	}
	_, err = m.Migrate(ctx, pool)
	if err == nil || !strings.Contains(err.Error(), "newer than this build knows") {
		t.Fatalf("err = %v", err)
	}
}

func TestSchemaNameValidated(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{`x"; DROP TABLE y; --`, "Outbox", "1abc", "pg_outbox", "a-b", "a b", strings.Repeat("a", 64), "é"} {
		_, err := outboxmigrate.New(&outboxmigrate.Config{Schema: bad})
		if err == nil {
			t.Errorf("schema %q accepted", bad)
			continue
		}
		if !strings.Contains(err.Error(), "Config.Schema") {
			t.Errorf("schema %q: error %q does not name the field", bad, err)
		}
	}
	for _, good := range []string{"outbox", "_x", "a1", strings.Repeat("a", 63)} {
		if _, err := outboxmigrate.New(&outboxmigrate.Config{Schema: good}); err != nil {
			t.Errorf("schema %q refused: %v", good, err)
		}
	}
}

// The printed SQL (for goose/atlas/tern users) is the same SQL Migrate runs, and it
// applies cleanly on its own.
func TestMigrationsSQLAppliesStandalone(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	m, err := outboxmigrate.New(&outboxmigrate.Config{Schema: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	for _, mig := range m.Migrations() {
		if strings.Contains(mig.SQL, "{{schema}}") || !strings.Contains(mig.SQL, `"elsewhere".`) {
			t.Fatalf("migration %d not rendered for the schema", mig.Version)
		}
		if _, err := pool.Exec(context.Background(), mig.SQL); err != nil {
			t.Fatalf("migration %d: %v", mig.Version, err)
		}
	}
}

// events.partition (generated inline) and partition_of() agree, and spread keys over
// the 4096 event partitions.
func TestPartitionColumnMatchesPartitionOf(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type)
		SELECT gen_random_uuid(), 'order', 'o' || g, 'x' FROM generate_series(1, 2000) g`)
	if err != nil {
		t.Fatal(err)
	}
	var mismatched, distinct, outOfRange int
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE partition <> outbox.partition_of(aggregate_type, aggregate_id)),
		count(DISTINCT partition), count(*) FILTER (WHERE partition NOT BETWEEN 0 AND 4095) FROM outbox.events`).Scan(&mismatched, &distinct, &outOfRange)
	if err != nil {
		t.Fatal(err)
	}
	if mismatched != 0 || outOfRange != 0 {
		t.Fatalf("%d rows whose partition differs from partition_of, %d out of range", mismatched, outOfRange)
	}
	if distinct < 1500 {
		t.Fatalf("2000 keys fell into only %d partitions: the hash does not spread", distinct)
	}
}

// A database whose encoding is not UTF8 is refused, with an error that says so and what
// to do, before anything is created: its payloads would reach the sink converted.
func TestMigrateRefusesANonUTF8Database(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	connString := pgtest.ConnString(t, &pgtest.Options{Empty: true})
	admin := pgtest.PoolFor(t, connString)
	name := "latin1_" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "_")
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name+` ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP DATABASE `+name+` WITH (FORCE)`) })
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := outboxmigrate.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Migrate(ctx, pool)
	if !errors.Is(err, outboxmigrate.ErrNotUTF8) || !strings.Contains(err.Error(), "LATIN1") {
		t.Fatalf("Migrate on a LATIN1 database: %v; want ErrNotUTF8 naming LATIN1", err)
	}
	var schemas int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'outbox'`).Scan(&schemas); err != nil || schemas != 0 {
		t.Fatalf("the refused migration left schema outbox (%d, %v)", schemas, err)
	}
}

// A consumer-only service migrates the inbox set alone: it gets the inbox tables and none
// of the outbox's; a later Migrate with every set adds the outbox's without touching the
// inbox's.
func TestInboxSetAlone(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	ctx := context.Background()
	tables := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'outbox' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	inboxOnly, err := outboxmigrate.New(&outboxmigrate.Config{Sets: []outboxmigrate.Set{outboxmigrate.SetInbox}})
	if err != nil {
		t.Fatal(err)
	}
	for _, mig := range inboxOnly.Migrations() {
		if mig.Set != outboxmigrate.SetInbox {
			t.Fatalf("migration %d of set %q selected with the inbox set alone", mig.Version, mig.Set)
		}
	}
	res, err := inboxOnly.Migrate(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) == 0 || res.Applied[0] != 6 {
		t.Fatalf("inbox set applied %v; want [6 …]", res.Applied)
	}
	got := strings.Join(tables(), " ")
	if got != "inbox inbox_parked inbox_quarantine inbox_versions schema_migrations" {
		t.Fatalf("tables after the inbox set: %s", got)
	}
	if res, err := inboxOnly.Migrate(ctx, pool); err != nil || len(res.Applied) != 0 {
		t.Fatalf("re-run of the inbox set: %+v, %v; want nothing applied", res, err)
	}
	all, err := outboxmigrate.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = all.Migrate(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Applied {
		if v == 6 {
			t.Fatalf("every set applied %v: 0006 again", res.Applied)
		}
	}
	if !strings.Contains(strings.Join(tables(), " "), "events") || res.Version != all.Latest() {
		t.Fatalf("after every set: tables %v, version %d", tables(), res.Version)
	}
}

func TestUnknownSetRefused(t *testing.T) {
	t.Parallel()
	_, err := outboxmigrate.New(&outboxmigrate.Config{Sets: []outboxmigrate.Set{"inbox", "nope"}})
	if err == nil || !strings.Contains(err.Error(), "Config.Sets[1]") {
		t.Fatalf("err = %v; want one naming Config.Sets[1]", err)
	}
}
