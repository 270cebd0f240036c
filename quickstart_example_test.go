package outbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/outboxmigrate"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// The README's quick start, run: migrate, write a business row and its event in one
// transaction, and relay the event to a sink.
func Example_quickStart() {
	ctx := context.Background()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, status text)`); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO orders VALUES ('o-1', 'new')`); err != nil {
		panic(err)
	}
	sink := &memsink.Sink{}
	ctx, stop := context.WithCancel(ctx)
	go func() { // stop the relay once the event is out
		_ = sink.WaitFor(ctx, 1)
		stop()
	}()
	if err := quickStart(ctx, pool, sink); err != nil {
		panic(err)
	}
	for _, m := range sink.Messages() {
		fmt.Println(m.AggregateID, m.EventType, string(m.Payload))
	}
	// Output:
	// o-1 order.paid {"amount": 1200}
}

// quickStart holds, between its markers, the README's quick start as written there
// (TestReadmeQuickStartIsTheExample keeps them equal).
func quickStart(ctx context.Context, pool *pgxpool.Pool, sink *memsink.Sink) error {
	// quick start begins
	// Once per deploy or at start-up: idempotent, safe from many processes at once.
	migrator, err := outboxmigrate.New(nil) // schema "outbox"
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, pool); err != nil {
		return err
	}

	// The business change and its event, in one transaction; the Notifier wakes the
	// relays once it has committed.
	notifier, err := outbox.NewNotifier(pool, nil)
	if err != nil {
		return err
	}
	defer notifier.Close()
	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, "o-1"); err != nil {
			return err
		}
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
			AggregateType: "order", AggregateID: "o-1", EventType: "order.paid",
			Payload: []byte(`{"amount": 1200}`),
		})
	}, notifier.AfterCommit)
	if err != nil {
		return err
	}

	// The relay publishes committed events to a sink (here in memory; Kafka, NATS,
	// RabbitMQ, webhooks, Redis and SQS below) until ctx is cancelled. Run as many as
	// you like: in ordered mode (the default) they share the work by partition leases
	// and keep per-aggregate order.
	r, err := relay.New(pool, sink, nil)
	if err != nil {
		return err
	}
	return r.Run(ctx)
	// quick start ends
}
