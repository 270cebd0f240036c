package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/sink/natssink"
)

// natsSink connects to NATS as natssink asks (no reconnect buffer, so an outage fails
// publishes at once; reconnecting forever) and returns the JetStream sink.
func (a *app) natsSink(ctx context.Context) (outbox.Sink, func() error, error) {
	c := a.cfg.Sink.NATS
	if c.Stream == "" {
		return nil, nil, usagef("sink.nats.stream is required with sink.type nats")
	}
	nc, err := nats.Connect(c.URL, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.Timeout(5*time.Second), nats.Name("outbox-relay"))
	if err != nil {
		return nil, nil, fmt.Errorf("sink.nats.url: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("sink.nats: %w", err)
	}
	s, err := natssink.New(ctx, js, &natssink.Config{Stream: c.Stream, Subject: c.Subject, Logger: a.log})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("sink.nats.stream: %w", err)
	}
	return s, func() error { nc.Close(); return nil }, nil
}
