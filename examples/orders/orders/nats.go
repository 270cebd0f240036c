package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/natssink"
)

// The JetStream side of the contract.
const (
	// Stream is the JetStream stream the order events are published to.
	Stream = "ORDERS"
	// SubjectTemplate is the sink's subject template: "orders." and the event type.
	SubjectTemplate = "orders.{{.EventType}}"
	// SubjectOrderPlaced is the subject of the order.placed events.
	SubjectOrderPlaced = "orders." + EventOrderPlaced
)

// StreamConfig is the configuration [EnsureStream] gives the stream: every subject
// under "orders.", on file, with a two-minute duplicate window (the sink sends each
// event's id as Nats-Msg-Id, so a relay's retry within it is stored once; consumers
// deduplicate the rest with the inbox).
func StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       Stream,
		Subjects:   []string{"orders.>"},
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}
}

// EnsureStream creates the stream, or updates it to [StreamConfig]. Producer and
// consumers may all call it at start, in any order.
func EnsureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	st, err := js.CreateOrUpdateStream(ctx, StreamConfig())
	if err != nil {
		return nil, fmt.Errorf("orders: create or update stream %s: %w", Stream, err)
	}
	return st, nil
}

// NewRelay returns a relay publishing the outbox of pool to the stream (which must
// exist: [EnsureStream]) through js. cfg nil means relay's defaults. Create js's
// connection with nats.ReconnectBufSize(-1), as natssink asks.
func NewRelay(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, cfg *relay.Config) (*relay.Relay, error) {
	if pool == nil || js == nil {
		return nil, errors.New("orders: NewRelay: pool and js are required")
	}
	sink, err := natssink.New(ctx, js, &natssink.Config{Stream: Stream, Subject: SubjectTemplate})
	if err != nil {
		return nil, fmt.Errorf("orders: %w", err)
	}
	r, err := relay.New(pool, sink, cfg)
	if err != nil {
		return nil, fmt.Errorf("orders: %w", err)
	}
	return r, nil
}
