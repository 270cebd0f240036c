package redissink_test

import (
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/sink/redissink"
)

// A sink adding each event to a stream per aggregate type, trimmed to about a million
// entries, republishes stored once. Pass it to relay.New.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	sink, err := redissink.New(client, &redissink.Config{
		Stream: "orders:{{.AggregateType}}",
		MaxLen: 1_000_000,
		Dedup:  true,
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = sink // relay.New(pool, sink, nil)
}
