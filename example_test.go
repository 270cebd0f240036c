package outbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// Write a business row and its event in one transaction.
func ExampleWithTx() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, dsn), schema from outboxmigrate
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total int)`); err != nil {
		panic(err)
	}

	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('o-1', 42)`); err != nil {
			return err
		}
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
			AggregateType: "order",
			AggregateID:   "o-1",
			EventType:     "order.created",
			Payload:       []byte(`{"total": 42}`),
		})
	})
	fmt.Println("committed:", err == nil)

	var eventType string
	_ = pool.QueryRow(ctx, `SELECT event_type FROM outbox.events`).Scan(&eventType)
	fmt.Println("pending event:", eventType)
	// Output:
	// committed: true
	// pending event: order.created
}

// Invalid input is refused before any SQL runs, naming the field.
func ExampleEnqueue_invalid() {
	ctx := context.Background()
	pool := pgtest.ExamplePool()
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	err = outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{AggregateType: "order", EventType: "order.created"})
	fmt.Println(err)
	// Output:
	// invalid event 0: AggregateID: must not be empty
}
