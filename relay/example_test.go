package relay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Relay an aggregate's events to a sink, in the order they were written, until the
// context is cancelled.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New, then outboxmigrate's Migrate
	err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx),
			outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.created", Payload: []byte(`{}`)},
			outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.paid", Payload: []byte(`{}`)},
			outbox.Event{AggregateType: "order", AggregateID: "o-1", EventType: "order.shipped", Payload: []byte(`{}`)},
		)
	})
	if err != nil {
		panic(err)
	}

	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{MaxPerAggregate: 2}) // two per claim: three take two batches
	if err != nil {
		panic(err)
	}
	go func() {
		_ = sink.WaitFor(ctx, 3)
		stop()
	}()
	if err := r.Run(ctx); err != nil {
		panic(err)
	}
	for _, m := range sink.Messages() {
		fmt.Println(m.AggregateID, m.EventType)
	}
	// Output:
	// o-1 order.created
	// o-1 order.paid
	// o-1 order.shipped
}

// Give a type that floods (a bulk import) workers of its own: the last of the relay's two
// workers claims every other type, so an order event waits for none of the import's
// claims or commits.
func ExampleConfig_isolatedTypes() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New, then outboxmigrate's Migrate
	events := []outbox.Event{{AggregateType: "order", AggregateID: "o-1", EventType: "order.created", Payload: []byte(`{}`)}}
	for i := range 3 {
		events = append(events, outbox.Event{AggregateType: "import", AggregateID: fmt.Sprintf("row-%d", i), EventType: "row.imported", Payload: []byte(`{}`)})
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
		panic(err)
	}

	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{Concurrency: 2, IsolatedTypes: []string{"import"}})
	if err != nil {
		panic(err)
	}
	go func() {
		_ = sink.WaitFor(ctx, len(events))
		stop()
	}()
	if err := r.Run(ctx); err != nil {
		panic(err)
	}
	byType := map[string]int{}
	for _, m := range sink.Messages() {
		byType[m.AggregateType]++
	}
	fmt.Println("import:", byType["import"], "order:", byType["order"])
	// Output:
	// import: 3 order: 1
}

// Let a type that may wait (a bulk import) go out at most 10 events a second, across the
// schema's relays: an order event written with it waits for none of it.
func ExampleConfig_typeRates() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pool := pgtest.ExamplePool() // in your code: pgxpool.New, then outboxmigrate's Migrate
	events := []outbox.Event{{AggregateType: "order", AggregateID: "o-1", EventType: "order.created", Payload: []byte(`{}`)}}
	for i := range 5 {
		events = append(events, outbox.Event{AggregateType: "import", AggregateID: fmt.Sprintf("row-%d", i), EventType: "row.imported", Payload: []byte(`{}`)})
	}
	if err := outbox.WithTx(ctx, pool, func(tx pgx.Tx) error { return outbox.Enqueue(ctx, outbox.PgxTx(tx), events...) }); err != nil {
		panic(err)
	}

	sink := &memsink.Sink{}
	r, err := relay.New(pool, sink, &relay.Config{TypeRates: map[string]float64{"import": 10}})
	if err != nil {
		panic(err)
	}
	go func() {
		_ = sink.WaitFor(ctx, len(events))
		stop()
	}()
	if err := r.Run(ctx); err != nil {
		panic(err)
	}
	var order, lastImport time.Time
	for _, d := range sink.Deliveries() {
		if d.Message.AggregateType == "order" {
			order = d.At
		} else {
			lastImport = d.At
		}
	}
	fmt.Println("the order went out before the imports:", order.Before(lastImport))
	fmt.Println("the imports took at least 0.3 s:", lastImport.Sub(order) >= 300*time.Millisecond)
	// Output:
	// the order went out before the imports: true
	// the imports took at least 0.3 s: true
}
