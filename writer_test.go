package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// setup returns a pool on a fresh database with a business table "orders".
func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	mustExec(t, pool, `CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)`)
	return pool
}

func mustExec(t *testing.T, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any,
) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return n
}

func event(aggregateID string) outbox.Event {
	return outbox.Event{AggregateType: "order", AggregateID: aggregateID, EventType: "order.created", Payload: []byte(`{"total":42}`)}
}

// S1: a rolled-back business transaction leaves no event; a committed one leaves exactly its events.
func TestS1RollbackLeavesNoEventCommitLeavesOne(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, `INSERT INTO orders VALUES ('o1', 42)`)
	if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), event("o1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events`); n != 0 {
		t.Fatalf("after rollback: %d events, want 0", n)
	}

	id := outbox.NewID()
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o1', 42)`); err != nil {
			return err
		}
		e := event("o1")
		e.ID = id
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), e)
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		gotType, gotAgg string
		payload         string
		version         int
	)
	err = pool.QueryRow(ctx, `SELECT event_type, aggregate_id, payload::text, schema_version FROM outbox.events WHERE id = $1`, id).
		Scan(&gotType, &gotAgg, &payload, &version)
	if err != nil {
		t.Fatalf("committed event not found: %v", err)
	}
	if gotType != "order.created" || gotAgg != "o1" || payload != `{"total":42}` || version != 1 {
		t.Fatalf("row = %q %q %s v%d", gotType, gotAgg, payload, version)
	}
}

func TestWithTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	boom := errors.New("boom")
	called := false
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), event("o1")); err != nil {
			return err
		}
		return boom
	}, func(context.Context) { called = true })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if called {
		t.Fatal("after-commit hook ran for a rolled-back transaction")
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events`); n != 0 {
		t.Fatalf("%d events after rollback", n)
	}
}

func TestEnqueueThroughDatabaseSQL(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	db, err := sql.Open("pgx", connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	_ = stdlib.GetDefaultDriver()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	bin := outbox.Event{AggregateType: "blob", AggregateID: "b1", EventType: "blob.stored", ContentType: "application/octet-stream", Payload: []byte{0, 1, 2, 255}}
	if err := outbox.Enqueue(ctx, outbox.SQLTx(tx), event("o1"), bin); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var b []byte
	if err := db.QueryRowContext(ctx, `SELECT payload_bytes FROM outbox.events WHERE aggregate_type = 'blob'`).Scan(&b); err != nil {
		t.Fatal(err)
	}
	if string(b) != string([]byte{0, 1, 2, 255}) {
		t.Fatalf("binary payload = %v", b)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox.events`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("count = %d, %v; want 2", n, err)
	}
}

func TestManyEventsOneCallKeepCallOrder(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	var events []outbox.Event
	for i := range 500 {
		e := event(fmt.Sprintf("o%d", i%7))
		e.Headers = map[string]string{"n": fmt.Sprint(i)}
		events = append(events, e)
	}
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) })
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT id FROM outbox.events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 500 {
		t.Fatalf("%d rows, want 500", len(ids))
	}
	// Enqueue assigned UUIDv7s in call order, and seq follows call order.
	for i := 1; i < len(ids); i++ {
		if ids[i].String() <= ids[i-1].String() {
			t.Fatalf("row %d: id %s not after %s: seq does not follow call order", i, ids[i], ids[i-1])
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	const writers, perWriter = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
					// Writers share a few aggregates, so the aggregate locks contend.
					return outbox.Enqueue(ctx, outbox.PgxTx(tx), event(fmt.Sprintf("o%d", (w+i)%5)), event(fmt.Sprintf("p%d", w)))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(DISTINCT id) FROM outbox.events`); n != writers*perWriter*2 {
		t.Fatalf("%d events, want %d", n, writers*perWriter*2)
	}
}

// Each bad input is refused with an error naming its field, writes nothing, and leaves
// the caller's transaction able to commit its business rows.
func TestInvalidEventRefusedAndTxStillCommits(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	long := strings.Repeat("x", 2000)
	cases := []struct {
		name  string
		event func(e *outbox.Event)
		field string
	}{
		{"empty aggregate type", func(e *outbox.Event) { e.AggregateType = "" }, "AggregateType"},
		{"empty aggregate id", func(e *outbox.Event) { e.AggregateID = "" }, "AggregateID"},
		{"empty event type", func(e *outbox.Event) { e.EventType = "" }, "EventType"},
		{"aggregate id too long for an index", func(e *outbox.Event) { e.AggregateID = long }, "AggregateID"},
		{"NUL in aggregate id", func(e *outbox.Event) { e.AggregateID = "a\x00b" }, "AggregateID"},
		{"invalid UTF-8 in event type", func(e *outbox.Event) { e.EventType = "bad\xff" }, "EventType"},
		{"invalid JSON", func(e *outbox.Event) { e.Payload = []byte(`{"a":`) }, "Payload"},
		{"JSON jsonb refuses: \\u0000", func(e *outbox.Event) { e.Payload = []byte(`{"a":"x\u0000y"}`) }, "Payload"},
		{"JSON jsonb refuses: lone surrogate", func(e *outbox.Event) { e.Payload = []byte(`["\ud800"]`) }, "Payload"},
		{"JSON jsonb refuses: huge number", func(e *outbox.Event) { e.Payload = []byte(`[1e999999]`) }, "Payload"},
		{"JSON content type with invalid JSON", func(e *outbox.Event) { e.ContentType = "application/cloudevents+json"; e.Payload = []byte("nope") }, "Payload"},
		{"payload over the limit", func(e *outbox.Event) { e.Payload = []byte(`"` + strings.Repeat("a", 901<<10) + `"`) }, "Payload"},
		{"schema version below 1", func(e *outbox.Event) { e.SchemaVersion = -1 }, "SchemaVersion"},
		{"negative aggregate version", func(e *outbox.Event) { e.AggregateVersion = -3 }, "AggregateVersion"},
		{"header with CRLF", func(e *outbox.Event) { e.Headers = map[string]string{"x-a": "1\r\nInjected: yes"} }, "Headers[x-a]"},
		{"header name with space", func(e *outbox.Event) { e.Headers = map[string]string{"bad name": "1"} }, "Headers[bad name]"},
		{"traceparent malformed", func(e *outbox.Event) { e.TraceParent = "00-xyz" }, "TraceParent"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			orderID := fmt.Sprintf("o%d", i)
			mustExec(t, tx, `INSERT INTO orders VALUES ($1, 1)`, orderID)
			good, bad := event(orderID), event(orderID)
			tc.event(&bad)
			err = outbox.Enqueue(ctx, outbox.PgxTx(tx), good, bad)
			var verr *outbox.ValidationError
			if !errors.As(err, &verr) || !errors.Is(err, outbox.ErrInvalidEvent) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			if verr.Field != tc.field || verr.Index != 1 || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v (field %q, index %d); want field %q, index 1", err, verr.Field, verr.Index, tc.field)
			}
			// The transaction is still usable and commits the business row, and no event.
			mustExec(t, tx, `UPDATE orders SET total = 2 WHERE id = $1`, orderID)
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit after refused enqueue: %v", err)
			}
			if n := count(t, pool, `SELECT count(*) FROM orders WHERE id = $1 AND total = 2`, orderID); n != 1 {
				t.Fatal("business row not committed")
			}
			if n := count(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = $1`, orderID); n != 0 {
				t.Fatalf("%d events written for a refused call", n)
			}
		})
	}
}

func TestNilAndPoolRefused(t *testing.T) {
	t.Parallel()
	if err := outbox.Enqueue(context.Background(), outbox.PgxTx(nil), event("o1")); err == nil || !strings.Contains(err.Error(), "tx is nil") {
		t.Fatalf("nil pgx tx: err = %v", err)
	}
	if err := outbox.Enqueue(context.Background(), outbox.SQLTx(nil), event("o1")); err == nil || !strings.Contains(err.Error(), "tx is nil") {
		t.Fatalf("nil sql tx: err = %v", err)
	}
	if err := outbox.Enqueue(context.Background(), nil, event("o1")); err == nil {
		t.Fatal("nil Tx accepted")
	}
	// A pool cannot be passed at all: outbox.PgxTx(pool) does not compile, because
	// *pgxpool.Pool has no Commit/Rollback. TestPoolDoesNotCompile in
	// compile_test.go proves it with the compiler.
}

func TestDuplicateIDReportedAndTxStillUsable(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	first := event("o1")
	first.ID = outbox.NewID()
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), first) }); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	other := event("o2")
	err = outbox.Enqueue(ctx, outbox.PgxTx(tx), other, first)
	var cerr *outbox.ConflictError
	if !errors.As(err, &cerr) || !errors.Is(err, outbox.ErrDuplicateID) || errors.Is(err, outbox.ErrVersionConflict) {
		t.Fatalf("err = %v, want a duplicate-id ConflictError", err)
	}
	if len(cerr.DuplicateIDs) != 1 || cerr.DuplicateIDs[0] != first.ID {
		t.Fatalf("DuplicateIDs = %v, want [%s]", cerr.DuplicateIDs, first.ID)
	}
	mustExec(t, tx, `INSERT INTO orders VALUES ('o2', 1)`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after duplicate id: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events`); n != 2 {
		t.Fatalf("%d events, want 2 (the first and the other one)", n)
	}
	// The same id twice in one call is refused before any SQL.
	dup := event("o3")
	dup.ID = first.ID
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), dup, dup) })
	if !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), "ID") {
		t.Fatalf("same id twice in a call: err = %v", err)
	}
}

// Two writers of the same aggregate version: one wins, the other gets a clear
// ErrVersionConflict and its transaction stays usable.
func TestConcurrentSameAggregateVersion(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	v7 := func() outbox.Event { e := event("o1"); e.AggregateVersion = 7; return e }
	txA, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Enqueue(ctx, outbox.PgxTx(txA), v7()); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		result <- outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
			err := outbox.Enqueue(ctx, outbox.PgxTx(tx), v7())
			if errors.Is(err, outbox.ErrVersionConflict) {
				// The transaction is still usable.
				if _, xerr := tx.Exec(ctx, `INSERT INTO orders VALUES ('lost', 0)`); xerr != nil {
					return xerr
				}
			}
			return err
		})
	}()
	waitForLockWait(t, pool)
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-result
	var cerr *outbox.ConflictError
	if !errors.As(err, &cerr) || !errors.Is(err, outbox.ErrVersionConflict) || len(cerr.VersionConflicts) != 1 {
		t.Fatalf("second writer: err = %v, want ErrVersionConflict", err)
	}
	if !strings.Contains(err.Error(), "aggregate version already exists") {
		t.Fatalf("message %q does not say what happened", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_version = 7`); n != 1 {
		t.Fatalf("%d rows with version 7", n)
	}
}

// waitForLockWait waits until some backend waits on a lock (a row or advisory lock).
func waitForLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no backend started waiting on a lock")
}

// With the aggregate lock (the default), a second writer of one aggregate waits for
// the first to commit, so seq order is commit order. With the lock off, the same
// schedule commits the later seq first: order by seq then disagrees with commit order.
func TestAggregateLockMakesSeqOrderCommitOrder(t *testing.T) {
	t.Parallel()
	// "one": single-event calls with generated ids (the plain single-event statement);
	// "batch": two-event calls with supplied ids (the batch statement with conflict
	// handling); "raw-sql": A is a writer of its own SQL, which takes the same lock with
	// outbox.lock_aggregate before its INSERT. All take the lock the same way.
	for _, shape := range []string{"one", "batch", "raw-sql"} {
		for _, lock := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/lock=%v", shape, lock), func(t *testing.T) {
				t.Parallel()
				pool := setup(t)
				ctx := context.Background()
				w, err := outbox.NewWriter(&outbox.WriterConfig{DisableAggregateLock: !lock})
				if err != nil {
					t.Fatal(err)
				}
				var (
					mu     sync.Mutex
					commit []string // event types of the "shared" events in commit order
				)
				committed := func(eventType string) { mu.Lock(); commit = append(commit, eventType); mu.Unlock() }
				call := func(name string) []outbox.Event {
					e := event("shared")
					e.EventType = name
					if shape == "one" {
						return []outbox.Event{e}
					}
					e.ID = outbox.NewID()
					other := event("other-" + name)
					other.ID = outbox.NewID()
					return []outbox.Event{other, e}
				}

				txA, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if shape == "raw-sql" {
					if lock {
						mustExec(t, txA, `SELECT outbox.lock_aggregate('order', 'shared')`)
					}
					mustExec(t, txA, `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload)
						VALUES (gen_random_uuid(), 'order', 'shared', 'a', '{}')`)
				} else if err := w.Enqueue(ctx, outbox.PgxTx(txA), call("a")...); err != nil {
					t.Fatal(err)
				}
				var aCommitting atomic.Bool
				bDone := make(chan error, 1)
				go func() {
					bDone <- outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
						err := w.Enqueue(ctx, outbox.PgxTx(tx), call("b")...)
						if lock && !aCommitting.Load() {
							return errors.New("B's Enqueue returned before A committed: the aggregate lock did not hold it")
						}
						return err
					}, func(context.Context) { committed("b") })
				}()
				if lock {
					waitForLockWait(t, pool) // B waits for A's aggregate lock
				} else if err := <-bDone; err != nil { // B commits first
					t.Fatal(err)
				}
				// With the lock, B's commit can only follow A's: record A first.
				aCommitting.Store(true)
				committed("a")
				if err := txA.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if lock {
					if err := <-bDone; err != nil {
						t.Fatal(err)
					}
				}
				rows, err := pool.Query(ctx, `SELECT event_type FROM outbox.events WHERE aggregate_id = 'shared' ORDER BY seq`)
				if err != nil {
					t.Fatal(err)
				}
				bySeq, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				if len(bySeq) != 2 {
					t.Fatalf("stored %v, want the events of A and B", bySeq)
				}
				same := fmt.Sprint(bySeq) == fmt.Sprint(commit)
				if lock && !same {
					t.Fatalf("with the lock, seq order %v != commit order %v", bySeq, commit)
				}
				if !lock && same {
					t.Fatalf("without the lock this schedule should diverge: seq order %v, commit order %v", bySeq, commit)
				}
			})
		}
	}
}

// Every field survives the trip through both adapters (pgx: typed arrays; database/sql:
// one JSON document).
func TestEveryFieldStoredThroughBothAdapters(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	db, err := sql.Open("pgx", connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	at := time.Date(2030, 1, 2, 3, 4, 5, 600000000, time.UTC)
	events := func(prefix string) []outbox.Event {
		return []outbox.Event{{
			ID: outbox.NewID(), AggregateType: "order", AggregateID: prefix + "-1 \"é\"", AggregateVersion: 3, EventType: "order.paid",
			SchemaVersion: 2, Topic: "orders.v2", Headers: map[string]string{"tenant": "acme", "x-quote": "a\\b \"q\""},
			Payload: []byte(`{"amount": 12.5, "tags": ["x"]}`), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			AvailableAt: at,
		}, {
			AggregateType: "blob", AggregateID: prefix + "-2", EventType: "blob.stored", ContentType: "application/octet-stream",
			Payload: []byte{0, 1, 0xff, '"'},
		}, {
			AggregateType: "empty", AggregateID: prefix + "-3", EventType: "ping",
		}}
	}
	// "batch": one call (the batch statements); "one": a call per event (the
	// single-event statement, with and without conflict handling).
	calls := func(prefix string, batch bool) [][]outbox.Event {
		if batch {
			return [][]outbox.Event{events(prefix)}
		}
		var out [][]outbox.Event
		for _, e := range events(prefix) {
			out = append(out, []outbox.Event{e})
		}
		return out
	}
	for _, batch := range []bool{true, false} {
		prefix := map[bool]string{true: "batch", false: "one"}[batch]
		if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
			for _, c := range calls("pgx"+prefix, batch) {
				if err := outbox.Enqueue(ctx, outbox.PgxTx(tx), c...); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		stx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls("sql"+prefix, batch) {
			if err := outbox.Enqueue(ctx, outbox.SQLTx(stx), c...); err != nil {
				t.Fatal(err)
			}
		}
		if err := stx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT split_part(aggregate_id, '-', 1), concat_ws('|', aggregate_type, substr(aggregate_id, strpos(aggregate_id, '-')),
		aggregate_version, event_type, schema_version, topic, headers, content_type, payload, encode(payload_bytes, 'hex'), trace_parent,
		CASE WHEN available_at = $1 THEN 'at' END) FROM outbox.events ORDER BY seq`, at)
	if err != nil {
		t.Fatal(err)
	}
	byAdapter := map[string][]string{}
	for rows.Next() {
		var adapter, row string
		if err := rows.Scan(&adapter, &row); err != nil {
			t.Fatal(err)
		}
		byAdapter[adapter] = append(byAdapter[adapter], row)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	want := []string{
		`order|-1 "é"|3|order.paid|2|orders.v2|{"tenant": "acme", "x-quote": "a\\b \"q\""}|application/json|{"amount": 12.5, "tags": ["x"]}|00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01|at`,
		`blob|-2|blob.stored|1|{}|application/octet-stream|0001ff22`,
		`empty|-3|ping|1|{}|application/json`,
	}
	for _, adapter := range []string{"pgxbatch", "pgxone", "sqlbatch", "sqlone"} {
		if fmt.Sprint(byAdapter[adapter]) != fmt.Sprint(want) {
			t.Errorf("%s adapter stored\n%q\nwant\n%q", adapter, byAdapter[adapter], want)
		}
	}
}

// Aggregates written by separate Enqueue calls in orders two transactions reverse
// deadlock on the aggregate locks; the error says so (ErrAggregateLockDeadlock) and what
// to do, for both adapters.
func TestEnqueueDeadlockSaysWhatHappened(t *testing.T) {
	t.Parallel()
	for _, adapter := range []string{"pgx", "database/sql"} {
		t.Run(adapter, func(t *testing.T) {
			t.Parallel()
			pool := setup(t)
			ctx := context.Background()
			db := stdlib.OpenDBFromPool(pool)
			t.Cleanup(func() { _ = db.Close() })
			begin := func() (outbox.Tx, func()) {
				if adapter == "pgx" {
					tx, err := pool.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					return outbox.PgxTx(tx), func() { _ = tx.Rollback(ctx) }
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				return outbox.SQLTx(tx), func() { _ = tx.Rollback() }
			}
			t1, end1 := begin()
			defer end1()
			t2, end2 := begin()
			defer end2()
			if err := outbox.Enqueue(ctx, t1, event("A")); err != nil {
				t.Fatal(err)
			}
			if err := outbox.Enqueue(ctx, t2, event("B")); err != nil {
				t.Fatal(err)
			}
			first := make(chan error, 1)
			go func() { first <- outbox.Enqueue(ctx, t1, event("B")) }() // waits for t2
			waitForLockWait(t, pool)
			errs := []error{outbox.Enqueue(ctx, t2, event("A"))} // closes the cycle
			end2()                                               // whichever was aborted, the other goes on
			errs = append(errs, <-first)
			var deadlock error
			for _, err := range errs {
				if errors.Is(err, outbox.ErrAggregateLockDeadlock) {
					deadlock = err
				}
			}
			if deadlock == nil {
				t.Fatalf("errors %v: none matches ErrAggregateLockDeadlock", errs)
			}
			if msg := deadlock.Error(); !strings.Contains(msg, "one Enqueue call") || !strings.Contains(msg, "retry") {
				t.Fatalf("the deadlock error does not say what to do: %s", msg)
			}
		})
	}
}

// WithTx on a transaction runs a savepoint, whose release is not a commit: after-commit
// hooks are refused before anything runs, instead of running while the enclosing
// transaction can still roll back. Without hooks a savepoint works as before.
func TestWithTxRefusesAfterCommitHooksInASavepoint(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := context.Background()
	var ran, hooked atomic.Bool
	err := outbox.WithTx(ctx, pool, func(outer pgx.Tx) error {
		err := outbox.WithTx(ctx, outer, func(tx pgx.Tx) error {
			ran.Store(true)
			return outbox.Enqueue(ctx, outbox.PgxTx(tx), event("nested"))
		}, func(context.Context) { hooked.Store(true) })
		if !errors.Is(err, outbox.ErrAfterCommitInSavepoint) {
			return fmt.Errorf("WithTx on a tx with a hook: %w, want ErrAfterCommitInSavepoint", err)
		}
		return outbox.WithTx(ctx, outer, func(tx pgx.Tx) error { // no hooks: a savepoint
			return outbox.Enqueue(ctx, outbox.PgxTx(tx), event("nested"))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if ran.Load() || hooked.Load() {
		t.Fatalf("refused WithTx ran fn (%v) or its hook (%v)", ran.Load(), hooked.Load())
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'nested'`); n != 1 {
		t.Fatalf("%d events, want the one from the savepoint without hooks", n)
	}
}
