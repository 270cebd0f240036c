package inventory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/inventory"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// Apply an order.placed message twice, as a broker redelivering it would: the stock is
// taken once.
func ExampleConsumer_Process() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err := inventory.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	if err := inventory.Seed(ctx, pool, "widget", 10); err != nil {
		panic(err)
	}
	c, err := inventory.New(nil)
	if err != nil {
		panic(err)
	}

	// In your code the message comes from the broker (Consumer.NewRunner decodes it).
	e, _ := orders.PlacedEvent(orders.Order{ID: outbox.NewID(), Customer: "ada", SKU: "widget", Quantity: 3, CreatedAt: time.Now()})
	msg := outbox.Message{
		ID: outbox.NewID(), AggregateType: e.AggregateType, AggregateID: e.AggregateID, AggregateVersion: e.AggregateVersion,
		EventType: e.EventType, SchemaVersion: 1, ContentType: outbox.ContentTypeJSON, Payload: e.Payload,
	}
	for range 2 {
		res, err := c.Process(ctx, pool, msg)
		if err != nil {
			panic(err) // nak: nothing was recorded
		}
		fmt.Println(res.Outcome) // ack
	}
	n, _ := inventory.Stock(ctx, pool, "widget")
	fmt.Println("widget on hand:", n)
	// Output:
	// applied
	// duplicate
	// widget on hand: 7
}
