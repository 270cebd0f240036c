package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/sink/natssink"
)

// ConsumerConfig is the durable JetStream consumer [EnsureConsumer] creates on the
// orders stream: named [ConsumerName], the order.placed subject alone, explicit acks
// (the runner acks after the inbox's commit), redelivery after 30 s without an ack.
func ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		FilterSubject: orders.SubjectOrderPlaced,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1000,
	}
}

// EnsureConsumer creates the orders stream (orders.EnsureStream) and the consumer
// ([ConsumerConfig]), or updates them: the inventory may start before the producer.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	st, err := orders.EnsureStream(ctx, js)
	if err != nil {
		return nil, err
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, ConsumerConfig())
	if err != nil {
		return nil, fmt.Errorf("inventory: create or update consumer %s: %w", ConsumerName, err)
	}
	return cons, nil
}

// NewRunner returns a natssink Runner feeding cons to c on db: each message is
// processed in its transaction and acked after the commit; a failed one is Nak'ed
// with cfg.RetryDelay. cfg nil means natssink's defaults.
func (c *Consumer) NewRunner(cons jetstream.Consumer, db outbox.TxBeginner, cfg *natssink.RunnerConfig) (*natssink.Runner, error) {
	return natssink.NewRunner(cons, db, c.inbox, c.Handle, cfg)
}
