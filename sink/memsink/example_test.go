package memsink_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/memsink"
)

// Refuse one message: the later messages of its aggregate are not sent, other
// aggregates go on.
func Example() {
	sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		if m.EventType == "order.cancelled" {
			return errors.New("refused")
		}
		return nil
	}}
	msgs := []outbox.Message{
		{AggregateType: "order", AggregateID: "o-1", EventType: "order.created"},
		{AggregateType: "order", AggregateID: "o-1", EventType: "order.cancelled"},
		{AggregateType: "order", AggregateID: "o-2", EventType: "order.created"},
		{AggregateType: "order", AggregateID: "o-1", EventType: "order.archived"},
	}
	errs := sink.Publish(context.Background(), msgs)
	for i, err := range errs {
		status := "delivered"
		switch {
		case errors.Is(err, outbox.ErrNotSent):
			status = "not sent"
		case err != nil:
			status = "failed"
		}
		fmt.Println(msgs[i].AggregateID, msgs[i].EventType, status)
	}
	for _, d := range sink.Deliveries() {
		fmt.Println("delivery", d.N, d.Message.AggregateID, d.Message.EventType)
	}
	// Output:
	// o-1 order.created delivered
	// o-1 order.cancelled failed
	// o-2 order.created delivered
	// o-1 order.archived not sent
	// delivery 1 o-1 order.created
	// delivery 2 o-2 order.created
}

// Take the sink down: every message fails as unavailable.
func ExampleSink_SetDown() {
	sink := &memsink.Sink{}
	sink.SetDown(true)
	errs := sink.Publish(context.Background(), []outbox.Message{{AggregateType: "order", AggregateID: "o-1", EventType: "order.created"}})
	fmt.Println(outbox.IsUnavailable(errs[0]), sink.Count())
	// Output:
	// true 0
}

// Wait until another goroutine (a relay, say) delivered enough messages.
func ExampleSink_WaitFor() {
	sink := &memsink.Sink{}
	go sink.Publish(context.Background(), []outbox.Message{
		{AggregateType: "order", AggregateID: "o-1", EventType: "order.created"},
		{AggregateType: "order", AggregateID: "o-1", EventType: "order.paid"},
	})
	if err := sink.WaitFor(context.Background(), 2); err != nil {
		fmt.Println(err)
	}
	for _, m := range sink.Messages() {
		fmt.Println(m.EventType)
	}
	// Output:
	// order.created
	// order.paid
}
