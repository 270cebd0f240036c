package sinkformat_test

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/sinkformat"
)

func ExampleRouter() {
	r, err := sinkformat.NewRouter("{{.AggregateType}}.{{escape .AggregateID}}", sinkformat.KafkaTopic)
	if err != nil {
		panic(err)
	}
	for _, m := range []outbox.Message{
		{AggregateType: "order", AggregateID: "o-1"},
		{AggregateType: "order", AggregateID: "tenant:1/o 2"},
		{AggregateType: "order", AggregateID: "o-3", Topic: "billing"},
		{AggregateType: "ørder", AggregateID: "o-4"},
	} {
		fmt.Println(r.Route(&m))
	}
	// Output:
	// order.o-1 <nil>
	// order.tenant_3a1_2fo_202 <nil>
	// billing <nil>
	//  destination refused: "ørder.o-4": a kafka topic name holds only [a-zA-Z0-9._-], this one byte 0xc3 at offset 0
}

func ExampleEncoder_Headers() {
	e, err := sinkformat.NewEncoder(sinkformat.Kafka, sinkformat.Outbox, "")
	if err != nil {
		panic(err)
	}
	hs, err := e.Headers(outbox.Message{
		ID: uuid.MustParse("0190a6e2-7c3b-7d2e-9f10-3a5b6c7d8e9f"), AggregateType: "order", AggregateID: "o-1",
		AggregateVersion: 3, EventType: "order.paid", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON,
		Headers: map[string]string{"tenant": "acme"}, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	})
	if err != nil {
		panic(err)
	}
	for _, h := range hs {
		fmt.Printf("%s: %s\n", h.Name, h.Value)
	}
	// Output:
	// id: 0190a6e2-7c3b-7d2e-9f10-3a5b6c7d8e9f
	// outbox-event-type: order.paid
	// outbox-aggregate-type: order
	// outbox-aggregate-id: o-1
	// outbox-aggregate-version: 3
	// outbox-schema-version: 1
	// outbox-created-at: 2026-01-02T03:04:05Z
	// content-type: application/json
	// tenant: acme
}

func ExampleEscape() {
	e := sinkformat.Escape("tenant:1/o_2")
	back, _ := sinkformat.Unescape(e)
	fmt.Println(e, back)
	// Output: tenant_3a1_2fo_5f2 tenant:1/o_2
}
