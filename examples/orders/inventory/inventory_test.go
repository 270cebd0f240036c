package inventory_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/inventory"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// newDB returns a pool on a fresh database migrated by inventory.Migrate, widget
// stocked with 10.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	if err := inventory.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := inventory.Seed(ctx, pool, "widget", 10); err != nil {
		t.Fatal(err)
	}
	return pool
}

// placed returns the message of an order.placed event of sku and quantity, as the relay
// delivers it.
func placed(t *testing.T, sku string, quantity int) outbox.Message {
	t.Helper()
	o := orders.Order{ID: outbox.NewID(), Customer: "ada", SKU: sku, Quantity: quantity, CreatedAt: time.Now()}
	e, err := orders.PlacedEvent(o)
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Message{
		ID: outbox.NewID(), AggregateType: e.AggregateType, AggregateID: e.AggregateID, AggregateVersion: e.AggregateVersion,
		EventType: e.EventType, SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: e.Payload, CreatedAt: o.CreatedAt,
	}
}

func stock(t *testing.T, pool *pgxpool.Pool, sku string) int {
	t.Helper()
	n, err := inventory.Stock(context.Background(), pool, sku)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An event's effect happens once: its second delivery is a duplicate, the stock
// taken once.
func TestProcessTakesStockOncePerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	c, err := inventory.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := placed(t, "widget", 3)
	for i, want := range []inbox.Outcome{inbox.Applied, inbox.Duplicate, inbox.Duplicate} {
		res, err := c.Process(ctx, pool, msg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != want {
			t.Fatalf("delivery %d: %s, want %s", i+1, res.Outcome, want)
		}
	}
	if n := stock(t, pool, "widget"); n != 7 {
		t.Fatalf("widget: %d on hand, want 10 - 3 = 7", n)
	}
	// Stock may go below zero: the rest is backordered.
	if _, err := c.Process(ctx, pool, placed(t, "widget", 9)); err != nil {
		t.Fatal(err)
	}
	if n := stock(t, pool, "widget"); n != -2 {
		t.Fatalf("widget: %d on hand, want 7 - 9 = -2", n)
	}
	if st := c.Inbox().Stats(); st.Applied != 2 || st.Duplicates != 2 {
		t.Fatalf("stats %+v, want 2 applied and 2 duplicates", st)
	}
}

// An order of an unknown SKU, a payload that is no OrderPlaced, and an event type the
// consumer does not accept are quarantined (acked, not retried forever) and change no
// stock; a restocked SKU's event applies on replay.
func TestUnprocessableEventsAreQuarantined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	c, err := inventory.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	unknown := placed(t, "gizmo", 1)
	garbled := placed(t, "widget", 1)
	garbled.Payload = []byte(`{"sku": 5}`)
	otherType := placed(t, "widget", 1)
	otherType.EventType = "order.paid"
	for _, m := range []outbox.Message{unknown, garbled, otherType} {
		res, err := c.Process(ctx, pool, m)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != inbox.Quarantined {
			t.Fatalf("%s %s: %s (%s), want quarantined", m.EventType, m.Payload, res.Outcome, res.Reason)
		}
	}
	if n := stock(t, pool, "widget"); n != 10 {
		t.Fatalf("widget: %d on hand, want 10 untouched", n)
	}
	if err := inventory.Seed(ctx, pool, "gizmo", 4); err != nil {
		t.Fatal(err)
	}
	res, err := c.Inbox().Replay(ctx, pool, unknown.ID, c.Handle)
	if err != nil || res.Outcome != inbox.Applied {
		t.Fatalf("replay after restocking: %s, %v; want applied", res.Outcome, err)
	}
	if n := stock(t, pool, "gizmo"); n != 3 {
		t.Fatalf("gizmo: %d on hand, want 4 - 1 = 3", n)
	}
	var e orders.OrderPlaced
	if err := json.Unmarshal(unknown.Payload, &e); err != nil || e.SKU != "gizmo" {
		t.Fatal(e, err)
	}
}
