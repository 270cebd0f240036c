package amqpsink_test

import (
	"log"

	"github.com/outboxkit/outbox/sink/amqpsink"
)

// A sink publishing to the topic exchange "events" with routing keys by aggregate
// and event type (the default). Pass it to relay.New.
func Example() {
	sink, err := amqpsink.New(&amqpsink.Config{URL: "amqp://relay:secret@rabbitmq:5672/orders", Exchange: "events"})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = sink.Close() }()
	// relay.New(pool, sink, nil)
}
