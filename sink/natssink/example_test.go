package natssink_test

import (
	"context"
	"log"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/sink/natssink"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

// A sink for the stream ORDERS, with subjects by aggregate and event type, in
// CloudEvents binary mode. Pass it to relay.New.
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	sink, err := natssink.New(ctx, js, &natssink.Config{
		Stream:  "ORDERS",
		Subject: "orders.{{.AggregateType}}.{{.EventType}}",
		Format:  sinkformat.CloudEvents,
		Source:  "/orders-service",
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = sink // relay.New(pool, sink, nil)
}
