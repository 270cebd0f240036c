package orders_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// The order row and its event commit together, the event as the contract says.
func TestPlaceOrderWritesOrderAndEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	s := newService(t, pool)
	o, err := s.PlaceOrder(ctx, orders.Order{Customer: "ada", SKU: "widget", Quantity: 3})
	if err != nil {
		t.Fatal(err)
	}
	if o.ID.Version() != 7 || o.CreatedAt.IsZero() {
		t.Fatalf("placed order %+v: want a UUIDv7 id and a creation time", o)
	}
	got, err := s.Order(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Customer != "ada" || got.SKU != "widget" || got.Quantity != 3 || !got.CreatedAt.Equal(o.CreatedAt) {
		t.Fatalf("read back %+v, placed %+v", got, o)
	}
	var aggType, aggID, eventType string
	var version int64
	var payload []byte
	err = pool.QueryRow(ctx, `SELECT aggregate_type, aggregate_id, aggregate_version, event_type, payload::text FROM outbox.events`).
		Scan(&aggType, &aggID, &version, &eventType, &payload)
	if err != nil {
		t.Fatal(err)
	}
	if aggType != "order" || aggID != o.ID.String() || version != 1 || eventType != "order.placed" {
		t.Fatalf("event (%s, %s, v%d, %s), want (order, %s, v1, order.placed)", aggType, aggID, version, eventType, o.ID)
	}
	var e orders.OrderPlaced
	if err := json.Unmarshal(payload, &e); err != nil {
		t.Fatal(err)
	}
	if e.OrderID != o.ID || e.Customer != "ada" || e.SKU != "widget" || e.Quantity != 3 || !e.PlacedAt.Equal(o.CreatedAt) {
		t.Fatalf("payload %s does not describe order %+v", payload, o)
	}
	if _, err := s.Order(ctx, uuid.New()); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("unknown order: %v, want ErrNotFound", err)
	}
}

// A business transaction that fails after Enqueue (here at COMMIT, by a deferred
// constraint trigger on the orders table) takes the event with it: no order, no event,
// nothing relayed. Were the event written outside the order's transaction, it would
// stay behind and be published for an order that does not exist.
func TestFailureAfterEnqueueRollsBackTheEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	_, err := pool.Exec(ctx, `
CREATE FUNCTION refuse_blocked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.customer = 'blocked' THEN
        RAISE EXCEPTION 'customer % is blocked', NEW.customer;
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER refuse_blocked AFTER INSERT ON orders
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_blocked();`)
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, pool)
	if _, err := s.PlaceOrder(ctx, orders.Order{Customer: "blocked", SKU: "widget", Quantity: 1}); err == nil {
		t.Fatal("PlaceOrder of a blocked customer succeeded; the trigger should fail its commit")
	}
	if n := count(t, pool, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("%d orders after the failed transaction, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox.events`); n != 0 {
		t.Fatalf("%d events after the failed transaction, want 0: the event outlived its order", n)
	}
	// The same service still works, and only the committed order's event exists.
	o, err := s.PlaceOrder(ctx, orders.Order{Customer: "ada", SKU: "widget", Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	if err := pool.QueryRow(ctx, `SELECT aggregate_id FROM outbox.events`).Scan(&id); err != nil || id != o.ID.String() {
		t.Fatalf("the one event is of %q (%v), want %s", id, err, o.ID)
	}
}

// A caller-set order id that exists is refused, and nothing is written twice.
func TestPlaceOrderWithAnExistingID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	s := newService(t, pool)
	o, err := s.PlaceOrder(ctx, orders.Order{ID: uuid.New(), Customer: "ada", SKU: "widget", Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PlaceOrder(ctx, orders.Order{ID: o.ID, Customer: "bob", SKU: "gadget", Quantity: 2}); !errors.Is(err, orders.ErrExists) {
		t.Fatalf("a second order with the same id: %v, want ErrExists", err)
	}
	if o, e := count(t, pool, `SELECT count(*) FROM orders`), count(t, pool, `SELECT count(*) FROM outbox.events`); o != 1 || e != 1 {
		t.Fatalf("%d orders and %d events, want 1 and 1", o, e)
	}
}

// PlaceOrder wakes an idle relay through the Notifier: with the relay polling only
// once a minute, the event is published within seconds.
func TestPlaceOrderWakesTheRelay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := newDB(t)
	s := newService(t, pool)
	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{PollInterval: time.Minute, FallbackPollInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(time.Second) // the relay's first look finds nothing; it waits for a wake-up
	start := time.Now()
	o, err := s.PlaceOrder(ctx, orders.Order{Customer: "ada", SKU: "widget", Quantity: 1})
	if err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if err := sink.WaitFor(wait, 1); err != nil {
		t.Fatalf("the event was not published within 20 s (the relay polls once a minute): the Notifier did not wake it: %v", err)
	}
	if m := sink.Messages()[0]; m.AggregateID != o.ID.String() {
		t.Fatalf("published %s, want the order %s", m.AggregateID, o.ID)
	}
	t.Logf("published %s after the commit", time.Since(start))
}
