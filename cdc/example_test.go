package cdc_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/cdc"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A relay and a change-data-capture Source beside it: the events come from the WAL; the
// relay polls only for what the Source leaves (once a minute here). The server needs
// wal_level=logical and a role with the REPLICATION attribute.
func Example() {
	pool := pgtest.ExamplePool() // in your code: pgxpool.New, then outboxmigrate's Migrate
	ctx, stop := context.WithCancel(context.Background())
	sink := &memsink.Sink{} // in your code: a broker's sink

	r, err := relay.New(pool, sink, &relay.Config{Wakeup: relay.WakeupPoll, PollInterval: time.Minute})
	if err != nil {
		panic(err)
	}
	src, err := cdc.New(pool, r, &cdc.Config{Slot: "example_slot"})
	if err != nil {
		panic(err)
	}
	relayDone, srcDone := make(chan error, 1), make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()
	go func() { srcDone <- src.Run(ctx) }()
	for !src.Stats().Streaming {
		time.Sleep(10 * time.Millisecond)
	}

	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return outbox.Enqueue(ctx, outbox.PgxTx(tx), outbox.Event{
			AggregateType: "order", AggregateID: "42", EventType: "order.placed", Payload: []byte(`{"total":10}`),
		})
	})
	if err != nil {
		panic(err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sink.WaitFor(wait, 1); err != nil {
		panic(err)
	}
	fmt.Println(sink.Messages()[0].EventType)

	stop()
	<-srcDone
	<-relayDone
	// a throwaway database: its slot goes with it
	if _, err := pool.Exec(context.Background(), `SELECT pg_drop_replication_slot('example_slot')`); err != nil {
		panic(err)
	}
	// Output: order.placed
}

// Table-less mode: the producer writes its events into the WAL only (Writer.Emit, no row
// in the events table), and the Source publishes them from the stream. The Writer names
// the Source's slot: Emit refuses (outbox.ErrNoSlot) while it does not exist.
func Example_tableLess() {
	pool := pgtest.ExamplePool()
	ctx, stop := context.WithCancel(context.Background())
	sink := &memsink.Sink{}

	r, err := relay.New(pool, sink, &relay.Config{Wakeup: relay.WakeupPoll, PollInterval: time.Minute})
	if err != nil {
		panic(err)
	}
	src, err := cdc.New(pool, r, &cdc.Config{Slot: "example_tableless"})
	if err != nil {
		panic(err)
	}
	writer, err := outbox.NewWriter(&outbox.WriterConfig{Slot: "example_tableless"})
	if err != nil {
		panic(err)
	}
	relayDone, srcDone := make(chan error, 1), make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()
	go func() { srcDone <- src.Run(ctx) }()
	for !src.Stats().Streaming {
		time.Sleep(10 * time.Millisecond)
	}

	err = outbox.WithTx(ctx, pool, func(tx pgx.Tx) error {
		return writer.Emit(ctx, outbox.PgxTx(tx), outbox.Event{
			AggregateType: "order", AggregateID: "42", EventType: "order.placed", Payload: []byte(`{"total":10}`),
		})
	})
	if err != nil {
		panic(err)
	}
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sink.WaitFor(wait, 1); err != nil {
		panic(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox.events`).Scan(&rows); err != nil {
		panic(err)
	}
	fmt.Println(sink.Messages()[0].EventType, rows, "rows")

	stop()
	<-srcDone
	<-relayDone
	if _, err := pool.Exec(context.Background(), `SELECT pg_drop_replication_slot('example_tableless')`); err != nil {
		panic(err)
	}
	// Output: order.placed 0 rows
}
