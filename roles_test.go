package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxadmin"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// rolesFile is the least-privilege roles file of docs/operations.md.
const rolesFile = "docs/roles.sql"

// rolesDB is a database on which docs/roles.sql was applied, with a login role per
// component, members of the file's roles.
type rolesDB struct {
	admin string // the superuser's connection string
	login map[string]string
}

// TestRolesFile applies docs/roles.sql before and after the migrations, then runs each
// component as a login role of its role alone: the migrations as outbox_migrator,
// Enqueue and the Notifier as outbox_writer, a relay drain and retention as
// outbox_relay, replays, discards and the admin API as outbox_operator, and
// inbox.Process as outbox_consumer; and shows each refused what it must not do.
func TestRolesFile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	db := newRolesDB(ctx, t)
	admin := pgtest.PoolFor(t, db.admin)

	// The migrator: the migrations, the notify trigger (it owns the table), nothing more.
	migrator := db.pool(t, "outbox_migrator")
	m, err := outboxmigrate.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, migrator); err != nil {
		t.Fatalf("migrate as outbox_migrator: %v", err)
	}
	if err := relay.InstallNotifyTrigger(ctx, migrator, ""); err != nil {
		t.Fatalf("install the notify trigger as outbox_migrator: %v", err)
	}
	if err := relay.UninstallNotifyTrigger(ctx, migrator, ""); err != nil {
		t.Fatalf("uninstall the notify trigger as outbox_migrator: %v", err)
	}
	refused(ctx, t, migrator, "the migrator creates a role", `CREATE ROLE outbox_intruder`)
	db.apply(ctx, t) // after the migrations: the grants on the tables
	// Every table and view of the schema is granted to some component: a migration that
	// adds one without a line in the roles file fails here.
	rows, err := admin.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'outbox' AND c.relkind IN ('r', 'v', 'p')
		  AND NOT EXISTS (SELECT FROM unnest('{outbox_writer,outbox_relay,outbox_operator,outbox_consumer}'::text[]) AS r(role),
		                              unnest('{SELECT,INSERT,UPDATE,DELETE}'::text[]) AS p(privilege)
		                  WHERE has_table_privilege(r.role, c.oid, p.privilege))`)
	if err != nil {
		t.Fatal(err)
	}
	ungranted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ungranted) > 0 {
		t.Errorf("%s grants nothing on %v (%v)", rolesFile, ungranted, err)
	}
	var owner string
	if err := admin.QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE schemaname = 'outbox' AND tablename = 'events'`).Scan(&owner); err != nil || owner != "outbox_migrator" {
		t.Errorf("outbox.events is owned by %q (%v), want outbox_migrator", owner, err)
	}

	// The application's own table, which the consumer's handler writes.
	if _, err := admin.Exec(ctx, `CREATE TABLE public.effects (event_id uuid PRIMARY KEY);
		GRANT INSERT ON public.effects TO outbox_consumer`); err != nil {
		t.Fatal(err)
	}

	writer := db.pool(t, "outbox_writer")
	ids := enqueueAsWriter(ctx, t, writer, admin)
	refused(ctx, t, writer, "the writer deletes events", `DELETE FROM outbox.events`)
	refused(ctx, t, writer, "the writer reads payloads", `SELECT payload FROM outbox.events`)
	refused(ctx, t, writer, "the writer marks an event published", `UPDATE outbox.events SET published_at = now()`)
	refused(ctx, t, writer, "the writer reads the audit log", `SELECT * FROM outbox.replays`)

	relayPool := db.pool(t, "outbox_relay")
	msgs := drainAsRelay(ctx, t, relayPool, len(ids))
	refused(ctx, t, relayPool, "the relay writes the audit log", `INSERT INTO outbox.replays (action, actor, reason, event_ids) VALUES ('replay', 'relay', 'no', '{}')`)
	refused(ctx, t, relayPool, "the relay reads the inbox", `SELECT * FROM outbox.inbox`)
	refused(ctx, t, relayPool, "the relay drops a table", `DROP TABLE outbox.leases`)
	oldestTransactionVisible(ctx, t, db, relayPool)

	operator := db.pool(t, "outbox_operator")
	operateAsOperator(ctx, t, operator, admin, m)
	refused(ctx, t, operator, "the operator rewrites the audit log", `UPDATE outbox.replays SET reason = 'nothing happened'`)
	refused(ctx, t, operator, "the operator deletes the audit log", `DELETE FROM outbox.replays`)
	refused(ctx, t, operator, "the operator changes the leases", `UPDATE outbox.leases SET owner = NULL`)
	refused(ctx, t, operator, "the operator rewrites who paused and why", `UPDATE outbox.pauses SET paused_by = 'nobody', reason = 'nothing happened'`)
	refused(ctx, t, operator, "the operator reads the inbox", `SELECT * FROM outbox.inbox`)

	consumer := db.pool(t, "outbox_consumer")
	consumeAsConsumer(ctx, t, consumer, msgs)
	refused(ctx, t, consumer, "the consumer reads the events", `SELECT * FROM outbox.events`)
	refused(ctx, t, consumer, "the consumer enqueues", `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type) VALUES (gen_random_uuid(), 'a', 'b', 'c')`)
}

// newRolesDB creates an empty database, applies the roles file (before the migrations,
// as the file says) and creates a login role per component.
func newRolesDB(ctx context.Context, t *testing.T) *rolesDB {
	t.Helper()
	db := &rolesDB{admin: pgtest.ConnString(t, &pgtest.Options{Empty: true}), login: map[string]string{}}
	db.apply(ctx, t)
	conn, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for _, role := range []string{"outbox_migrator", "outbox_writer", "outbox_relay", "outbox_operator", "outbox_consumer"} {
		login := fmt.Sprintf("%s_login_%d_%s", role, os.Getpid(), strings.ReplaceAll(uuid.NewString()[:8], "-", ""))
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN IN ROLE %s", login, role)); err != nil {
			t.Fatal(err)
		}
		if role == "outbox_migrator" {
			// Its sessions run as outbox_migrator, so what the migrations create is owned
			// by the group, not by this login (docs/operations.md).
			if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s SET role = %s", login, role)); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := pgx.Connect(ctx, db.admin)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = c.Close(ctx) }()
			// Its sessions first (the pools close after this cleanup runs).
			_, _ = c.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", login)
			if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+login); err != nil {
				t.Errorf("drop role %s: %v", login, err)
			}
		})
		db.login[role] = login
	}
	return db
}

// apply runs docs/roles.sql as the superuser.
func (db *rolesDB) apply(ctx context.Context, t *testing.T) {
	t.Helper()
	sql, err := os.ReadFile(rolesFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, string(sql), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("apply %s: %v", rolesFile, err)
	}
}

// pool returns a pool that logs in as the login role of role.
func (db *rolesDB) pool(t *testing.T, role string) *pgxpool.Pool {
	t.Helper()
	login := db.login[role]
	if !strings.Contains(db.admin, "://") {
		return pgtest.PoolFor(t, db.admin+" user="+login)
	}
	u, err := url.Parse(db.admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(login)
	return pgtest.PoolFor(t, u.String())
}

// refused runs sql and wants PostgreSQL's insufficient_privilege.
func refused(ctx context.Context, t *testing.T, pool *pgxpool.Pool, what, sql string) {
	t.Helper()
	_, err := pool.Exec(ctx, sql)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s (%s): want insufficient_privilege (42501), got %v", what, sql, err)
	}
}

// enqueueAsWriter writes events through every enqueue statement (one event, a batch,
// caller-supplied ids with a duplicate, a raw-SQL write with the aggregate lock) and
// wakes the relays with the Notifier. It returns the ids written.
func enqueueAsWriter(ctx context.Context, t *testing.T, pool, admin *pgxpool.Pool) []uuid.UUID {
	t.Helper()
	notifier, err := outbox.NewNotifier(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer notifier.Close()
	ev := func(agg string, v int64) outbox.Event {
		return outbox.Event{AggregateType: "order", AggregateID: agg, AggregateVersion: v, EventType: "order.placed", Payload: []byte(`{"n": 1}`)}
	}
	given := ev("o-3", 0)
	given.ID = outbox.NewID()
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), ev("o-1", 0)); err != nil { // enqueue_one
			return fmt.Errorf("one event: %w", err)
		}
		if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), ev("o-2", 1), ev("o-2", 2), ev("o-2", 3)); err != nil { // arrays, with the arbiter
			return fmt.Errorf("a batch: %w", err)
		}
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), given)
	}, notifier.AfterCommit)
	if err != nil {
		t.Fatalf("Enqueue as outbox_writer: %v", err)
	}
	// The same id again: ON CONFLICT DO NOTHING, then enqueue_conflicts reads the id back.
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), given) })
	if !errors.Is(err, outbox.ErrDuplicateID) {
		t.Fatalf("a duplicate id as outbox_writer: want ErrDuplicateID, got %v", err)
	}
	// A raw-SQL writer: the aggregate lock, then its own INSERT.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT outbox.lock_aggregate('order', 'o-4')`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			VALUES (gen_random_uuid(), 'order', 'o-4', 1, 'order.placed', '{"n": 4}')`)
		return err
	})
	if err != nil {
		t.Fatalf("raw-SQL write as outbox_writer: %v", err)
	}
	// Table-less: Emit reads pg_replication_slots and writes a logical decoding message,
	// both open to any role; no row.
	var slot string
	if err := admin.QueryRow(ctx, `SELECT 'roles_' || md5(current_database())`).Scan(&slot); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) })
	emitter, err := outbox.NewWriter(&outbox.WriterConfig{Slot: slot})
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return emitter.Emit(ctx, outbox.PgxTx(tx), ev("o-5", 0))
	}); err != nil {
		t.Fatalf("Emit as outbox_writer: %v", err)
	}
	rows, err := admin.Query(ctx, `SELECT id FROM outbox.events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) != 6 {
		t.Fatalf("the writer wrote %d events (%v), want 6", len(ids), err)
	}
	return ids
}

// drainAsRelay runs a relay (ordered: leases and membership; delete of nothing; the
// LISTEN wake-up) until the sink has n events, then retention in both keeping modes.
func drainAsRelay(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int) []outbox.Message {
	t.Helper()
	sink := &memsink.Sink{}
	var logs bytes.Buffer // every warning is a failure: a refused lease or membership write is only logged
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := relay.New(pool, sink, &relay.Config{Retention: relay.Retention{Keep: time.Millisecond}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	werr := sink.WaitFor(waitCtx, n)
	cancel()
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("relay as outbox_relay: %v", err)
	}
	if werr != nil {
		t.Fatalf("relay as outbox_relay: %d of %d events published: %v", sink.Count(), n, werr)
	}
	if logs.Len() > 0 {
		t.Errorf("relay as outbox_relay logged:\n%s", logs.String())
	}
	if st := r.Stats(); st.Errors > 0 {
		t.Errorf("relay as outbox_relay: %d errors", st.Errors)
	}
	// Retention: keep-then-archive, then keep-then-delete (what is left: nothing).
	archive, err := relay.New(pool, sink, &relay.Config{Retention: relay.Retention{Mode: relay.KeepThenArchive, Keep: time.Millisecond, BatchSize: 2}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if purged, err := archive.Purge(ctx); err != nil || purged != int64(n) {
		t.Fatalf("archive as outbox_relay: purged %d of %d: %v", purged, n, err)
	}
	if purged, err := r.Purge(ctx); err != nil || purged != 0 {
		t.Fatalf("purge as outbox_relay: purged %d, want 0: %v", purged, err)
	}
	return sink.Messages()
}

// lockedWriter serialises the writes of a logger's goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// oldestTransactionVisible: the daemon's outbox_oldest_transaction_age_seconds reads
// pg_stat_activity's backend_xmin, which PostgreSQL shows for other roles' sessions.
func oldestTransactionVisible(ctx context.Context, t *testing.T, db *rolesDB, relayPool *pgxpool.Pool) {
	t.Helper()
	other, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(ctx) }()
	tx, err := other.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	var age float64
	err = relayPool.QueryRow(ctx, `SELECT coalesce((SELECT extract(epoch FROM now() - min(xact_start)) FROM pg_stat_activity
		WHERE backend_xmin IS NOT NULL AND datname = current_database()), 0)::float8`).Scan(&age)
	if err != nil || age < 1 {
		t.Errorf("the relay role sees the oldest transaction as %.1fs old (%v), want ≥ 1s: backend_xmin is hidden from it", age, err)
	}
}

// operateAsOperator replays and discards by id (the library's operations, as the
// outbox command runs them), reads the schema's version, and replays through the
// admin API.
func operateAsOperator(ctx context.Context, t *testing.T, pool, admin *pgxpool.Pool, m *outboxmigrate.Migrator) {
	t.Helper()
	// Three dead events of three aggregates (made dead by the superuser: the relay
	// published everything).
	var dead []uuid.UUID
	for _, agg := range []string{"d-1", "d-2", "d-3"} {
		id := outbox.NewID()
		if _, err := admin.Exec(ctx, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, dead_at, attempts, last_error)
			VALUES ($1, 'order', $2, 'order.placed', now(), 10, 'boom')`, id, agg); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, id)
	}
	if got, err := relay.Replay(ctx, pool, relay.Action{IDs: dead[:1], Actor: "alice", Reason: "INC-1 fixed"}); err != nil || len(got) != 1 {
		t.Fatalf("relay.Replay as outbox_operator: %v %v", got, err)
	}
	if got, err := relay.Discard(ctx, pool, relay.Action{IDs: dead[1:2], Actor: "alice", Reason: "INC-1 obsolete"}); err != nil || len(got) != 1 {
		t.Fatalf("relay.Discard as outbox_operator: %v %v", got, err)
	}
	paused := relay.PauseRequest{Scope: relay.PauseScope{Kind: relay.PausePartition, Partition: 1}, Actor: "alice", Reason: "INC-2"}
	if _, made, err := relay.Pause(ctx, pool, paused); err != nil || !made {
		t.Fatalf("relay.Pause as outbox_operator: %v %v", made, err)
	}
	if _, err := relay.Resume(ctx, pool, paused); err != nil {
		t.Fatalf("relay.Resume as outbox_operator: %v", err)
	}
	if v, err := m.Version(ctx, pool); err != nil || v != m.Latest() {
		t.Fatalf("migration version as outbox_operator: %d, %v", v, err)
	}
	// outbox purge: retention by hand, archiving.
	purger, err := relay.New(pool, &memsink.Sink{}, &relay.Config{Retention: relay.Retention{Mode: relay.KeepThenArchive, Keep: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := purger.Purge(ctx); err != nil {
		t.Fatalf("purge as outbox_operator: %v", err)
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs}, nil))
	defer func() {
		if t.Failed() {
			t.Logf("outboxadmin's log:\n%s", logs.String())
		}
	}()
	h, err := outboxadmin.New(outboxadmin.Options{Pool: pool, Token: "a-token-of-at-least-16-bytes", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, path := range []string{"/api/status", "/api/dead", "/api/blocked", "/api/audit", "/api/events/" + dead[2].String(), "/", "/partitions"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s as outbox_operator: %s", path, resp.Status)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/replay",
		strings.NewReader(`{"filter":{"aggregate_id":"d-3"},"actor":"alice","reason":"INC-2 fixed"}`))
	req.Header.Set("Authorization", "Bearer a-token-of-at-least-16-bytes")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST /api/replay as outbox_operator: %s", resp.Status)
	}
	var audited int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM outbox.replays`).Scan(&audited); err != nil || audited != 3 {
		t.Errorf("audit rows: %d (%v), want 3", audited, err)
	}
}

// consumeAsConsumer processes the relay's messages through inbox.Process (one twice,
// one version past a gap first, so it parks and is unparked), quarantines one, lists
// and replays the quarantine, and purges the dedup rows.
func consumeAsConsumer(ctx context.Context, t *testing.T, pool *pgxpool.Pool, msgs []outbox.Message) {
	t.Helper()
	c, err := inbox.New(&inbox.Config{Name: "inventory"})
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	handle := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if fail.Load() {
			return outbox.Permanent(errors.New("not today"))
		}
		_, err := tx.Exec(ctx, `INSERT INTO public.effects (event_id) VALUES ($1)`, m.ID)
		return err
	}
	// The versioned aggregate o-2 (versions 1..3) last-first: 3 and 2 park, 1 unparks them.
	order := make([]outbox.Message, 0, len(msgs)+1)
	var versioned []outbox.Message
	for _, m := range msgs {
		if m.AggregateID == "o-2" {
			versioned = append([]outbox.Message{m}, versioned...)
			continue
		}
		order = append(order, m)
	}
	order = append(order, versioned...)
	order = append(order, order[0]) // a redelivery
	applied := map[inbox.Outcome]int{}
	for _, m := range order {
		res, err := c.Process(ctx, pool, m, handle)
		if err != nil {
			t.Fatalf("inbox.Process as outbox_consumer: %v", err)
		}
		applied[res.Outcome]++
	}
	if applied[inbox.Duplicate] != 1 || applied[inbox.Parked] != 2 {
		t.Errorf("outcomes as outbox_consumer: %v, want one duplicate and two parked", applied)
	}
	fail.Store(true)
	q := outbox.Message{ID: outbox.NewID(), AggregateType: "order", AggregateID: "q-1", EventType: "order.placed", SchemaVersion: 1}
	if res, err := c.Process(ctx, pool, q, handle); err != nil || res.Outcome != inbox.Quarantined {
		t.Fatalf("quarantine as outbox_consumer: %v %v", res.Outcome, err)
	}
	fail.Store(false)
	if list, err := c.Quarantined(ctx, pool, nil); err != nil || len(list) != 1 {
		t.Fatalf("Quarantined as outbox_consumer: %d, %v", len(list), err)
	}
	if res, err := c.Replay(ctx, pool, q.ID, handle); err != nil || res.Outcome != inbox.Applied {
		t.Fatalf("Replay as outbox_consumer: %v %v", res.Outcome, err)
	}
	if n, err := c.Purge(ctx, pool, inbox.PurgeOptions{OlderThan: time.Nanosecond}); err != nil || n == 0 {
		t.Fatalf("Purge as outbox_consumer: %d, %v", n, err)
	}
}
