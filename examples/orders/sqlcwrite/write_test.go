package sqlcwrite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/examples/orders/sqlcwrite"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// newDB returns a pgx pool and a database/sql handle on one fresh database migrated by
// orders.Migrate.
func newDB(t *testing.T) (*pgxpool.Pool, *sql.DB) {
	t.Helper()
	dsn := pgtest.ConnString(t, &pgtest.Options{Empty: true})
	pool := pgtest.PoolFor(t, dsn)
	if err := orders.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return pool, db
}

// The same order written both ways — orders.Service (pgx, outbox.Enqueue) and sqlcwrite
// (database/sql, the sqlc queries) — makes event rows equal in every column but the
// ones of the row's own identity, and the relay publishes the two alike.
func TestRelayedLikeEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, sqlDB := newDB(t)
	svc, err := orders.NewService(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	w, err := sqlcwrite.New(sqlDB, nil)
	if err != nil {
		t.Fatal(err)
	}
	order := orders.Order{Customer: "ada", SKU: "widget", Quantity: 2}
	byEnqueue, err := svc.PlaceOrder(ctx, order)
	if err != nil {
		t.Fatal(err)
	}
	bySQLC, err := w.PlaceOrder(ctx, order)
	if err != nil {
		t.Fatal(err)
	}

	// Every column, less those that differ by nature: the event's id and seq, the
	// order's id (aggregate id, its partition, the payload's order_id) and the times.
	rows, err := pool.Query(ctx, `
SELECT aggregate_id, to_jsonb(e) - 'seq' - 'id' - 'aggregate_id' - 'partition' - 'payload' - 'created_at' - 'available_at', payload::text,
       available_at = created_at
FROM outbox.events e ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		aggregateID, columns, payload string
		availableNow                  bool
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.aggregateID, &r.columns, &r.payload, &r.availableNow); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].aggregateID != byEnqueue.ID.String() || got[1].aggregateID != bySQLC.ID.String() {
		t.Fatalf("event rows %+v, want one of order %s (Enqueue), one of %s (sqlc)", got, byEnqueue.ID, bySQLC.ID)
	}
	if got[0].columns != got[1].columns || !got[0].availableNow || !got[1].availableNow {
		t.Fatalf("the rows differ:\nEnqueue: %s\nsqlc:    %s", got[0].columns, got[1].columns)
	}
	payloads := func(p string) orders.OrderPlaced {
		var e orders.OrderPlaced
		if err := json.Unmarshal([]byte(p), &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if a, b := payloads(got[0].payload), payloads(got[1].payload); a.Customer != b.Customer || a.SKU != b.SKU || a.Quantity != b.Quantity {
		t.Fatalf("payloads differ: %s and %s", got[0].payload, got[1].payload)
	}

	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	err = sink.WaitFor(wait, 2)
	stop()
	cancel()
	if rerr := <-done; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	msgs := sink.Messages()
	byAggregate := map[string]outbox.Message{}
	for _, m := range msgs {
		byAggregate[m.AggregateID] = m
	}
	a, b := byAggregate[byEnqueue.ID.String()], byAggregate[bySQLC.ID.String()]
	for _, m := range []outbox.Message{a, b} {
		if m.AggregateType != "order" || m.AggregateVersion != 1 || m.EventType != "order.placed" || m.SchemaVersion != 1 ||
			m.ContentType != outbox.ContentTypeJSON || m.Topic != "" || len(m.Headers) != 0 || m.TraceParent != "" {
			t.Errorf("published %+v, want order v1 order.placed, schema 1, JSON, no topic, headers or trace parent", m)
		}
	}
	var pa, pb orders.OrderPlaced
	if json.Unmarshal(a.Payload, &pa) != nil || json.Unmarshal(b.Payload, &pb) != nil || pa.OrderID != byEnqueue.ID || pb.OrderID != bySQLC.ID || pb.Quantity != 2 {
		t.Errorf("published payloads %s and %s, want the two orders", a.Payload, b.Payload)
	}
}

// A failure at COMMIT, after the event's insert, leaves neither row.
func TestFailureAfterInsertEventRollsBackBoth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, sqlDB := newDB(t)
	_, err := pool.Exec(ctx, `
CREATE FUNCTION refuse_all() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
CREATE CONSTRAINT TRIGGER refuse_all AFTER INSERT ON orders
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_all();`)
	if err != nil {
		t.Fatal(err)
	}
	w, err := sqlcwrite.New(sqlDB, func(context.Context) { t.Error("after-commit hook called for a failed commit") })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.PlaceOrder(ctx, orders.Order{Customer: "ada", SKU: "widget", Quantity: 1}); err == nil {
		t.Fatal("PlaceOrder succeeded; the trigger should fail its commit")
	}
	var o, e int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox.events)`).Scan(&o, &e); err != nil {
		t.Fatal(err)
	}
	if o != 0 || e != 0 {
		t.Fatalf("%d orders and %d events after the failed commit, want none", o, e)
	}
	if _, err := w.PlaceOrder(ctx, orders.Order{Customer: "ada", SKU: "widget", Quantity: 0}); err == nil {
		t.Fatal("an order of quantity 0 was accepted")
	}
}
