package orders_test

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// Place an order: the order row and its order.placed event commit together.
func ExampleService_PlaceOrder() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err := orders.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	s, err := orders.NewService(pool, nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()

	o, err := s.PlaceOrder(ctx, orders.Order{Customer: "ada", SKU: "widget", Quantity: 2})
	if err != nil {
		panic(err)
	}
	var aggregateID, eventType string
	_ = pool.QueryRow(ctx, `SELECT aggregate_id, event_type FROM outbox.events`).Scan(&aggregateID, &eventType)
	fmt.Println("event:", eventType, "of the order:", aggregateID == o.ID.String())

	_, err = s.PlaceOrder(ctx, orders.Order{Customer: "ada", SKU: "widget", Quantity: 0})
	fmt.Println(err)
	// Output:
	// event: order.placed of the order: true
	// quantity: must be between 1 and 10000, got 0
}
