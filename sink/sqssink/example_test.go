package sqssink_test

import (
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkit/outbox/sink/sqssink"
)

// A sink sending every event to one FIFO queue: each aggregate a message group, each
// event id its deduplication id. Pass it to relay.New.
func Example() {
	var cfg aws.Config // from config.LoadDefaultConfig(ctx) in a real program
	cfg.Region = "eu-west-1"
	sink, err := sqssink.New(sqs.NewFromConfig(cfg), &sqssink.Config{Queue: "orders.fifo"})
	if err != nil {
		log.Fatal(err)
	}
	_ = sink // relay.New(pool, sink, nil)
}
