package cli

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/amqpsink"
	"github.com/outboxkit/outbox/sink/redissink"
)

// redisSink returns the Redis Streams sink over a client of sink.redis.url.
func (a *app) redisSink() (outbox.Sink, func() error, error) {
	c := a.cfg.Sink.Redis
	opts, err := redis.ParseURL(c.URL)
	if err != nil {
		// go-redis's parse errors do not repeat the URL; the scrubber covers them anyway.
		return nil, nil, usagef("sink.redis.url: %w", err)
	}
	client := redis.NewClient(opts)
	s, err := redissink.New(client, &redissink.Config{Stream: c.Stream, Dedup: c.Dedup, Logger: a.log})
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("sink.redis: %w", err)
	}
	return s, client.Close, nil
}

// amqpSink returns the RabbitMQ sink (publisher confirms, mandatory; amqpsink's own
// reconnection).
func (a *app) amqpSink() (outbox.Sink, func() error, error) {
	c := a.cfg.Sink.AMQP
	if c.URL == "" {
		return nil, nil, usagef("sink.amqp.url is required with sink.type amqp")
	}
	s, err := amqpsink.New(&amqpsink.Config{URL: c.URL, Exchange: c.Exchange, RoutingKey: c.RoutingKey, Logger: a.log})
	if err != nil {
		return nil, nil, fmt.Errorf("sink.amqp: %w", err)
	}
	return s, s.Close, nil
}
