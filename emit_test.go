package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
)

// Emit writes nothing and says so while no logical slot of the database would read the
// WAL (a message no slot reads is lost), refuses an invalid event naming the field, and
// leaves the caller's transaction usable in both cases: the business row and an
// Enqueue'd event after them commit. Once a slot exists, Emit writes the message (read
// back from the slot, through both adapters) and no row.
func TestEmitRefusesWithoutASlotAndKeepsTheTransaction(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	ctx := t.Context()
	mustExec(t, pool, `CREATE TABLE emit_orders (id int PRIMARY KEY)`)
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO emit_orders VALUES (1)`); err != nil {
			return err
		}
		if err := outbox.Emit(ctx, outbox.PgxTx(tx), event("a")); !errors.Is(err, outbox.ErrNoSlot) {
			t.Errorf("Emit without a slot = %v, want ErrNoSlot", err)
		}
		var ve *outbox.ValidationError
		if err := outbox.Emit(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", AggregateID: "1"}); !errors.As(err, &ve) || ve.Field != "EventType" {
			t.Errorf("Emit of an event without a type = %v, want a ValidationError naming EventType", err)
		}
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), event("b"))
	})
	if err != nil {
		t.Fatalf("the transaction after the refusals: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM emit_orders`); n != 1 {
		t.Fatalf("%d orders committed, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events`); n != 1 {
		t.Fatalf("%d events rows, want the one Enqueue wrote", n)
	}

	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	// another tool's slot does not count: the reader's (WriterConfig.Slot) must exist
	other := "other_" + db[len(db)-4:]
	mustExec(t, pool, `SELECT pg_create_logical_replication_slot('`+other+`', 'pgoutput')`)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, other) })
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Emit(ctx, outbox.PgxTx(tx), event("x")) }); !errors.Is(err, outbox.ErrNoSlot) {
		t.Fatalf("Emit with only another tool's slot = %v, want ErrNoSlot", err)
	}
	slot := "emit_" + db[len(db)-4:]
	mustExec(t, pool, `SELECT pg_create_logical_replication_slot('`+slot+`', 'pgoutput')`)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) })
	w, err := outbox.NewWriter(&outbox.WriterConfig{Slot: slot})
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return w.Emit(ctx, outbox.PgxTx(tx), event("c"), event("d"))
	}); err != nil {
		t.Fatalf("Emit with a slot (pgx): %v", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer func() { _ = sqlDB.Close() }()
	tx, err := sqlDB.BeginTx(ctx, &sql.TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Emit(ctx, outbox.SQLTx(tx), event("e")); err != nil {
		t.Fatalf("Emit with a slot (database/sql): %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events`); n != 1 {
		t.Fatalf("%d events rows after Emit, want still 1 (table-less)", n)
	}
	// the messages, read back from the slot: one per Emit call, of the schema's prefix
	// (once the WAL is flushed: the test clusters commit asynchronously)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := count(t, pool, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
			'proto_version', '1', 'publication_names', 'none', 'messages', 'true')
			WHERE substr(data, 1, 1) = 'M' AND position('outbox:outbox'::bytea IN data) > 0`, slot)
		if got == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d logical decoding messages of the schema in the slot, want 2", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
