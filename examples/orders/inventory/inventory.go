package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/inbox"
)

// ConsumerName is the inbox consumer's name: its dedup records and versions are its
// own. Never rename a live consumer: its events would all be new to it.
const ConsumerName = "inventory"

// Config configures a [Consumer]. The zero value (or nil) means the defaults.
type Config struct {
	// Logger receives the inbox's warning for each quarantined event. Default:
	// slog.Default().
	Logger *slog.Logger
}

// Consumer applies order.placed events to the stock table, once per event. It is safe
// for concurrent use.
type Consumer struct {
	inbox *inbox.Consumer
}

// New returns a Consumer named [ConsumerName] that accepts order.placed at schema
// version 1 (any other event type or version is quarantined without running the
// handler) and parks events that arrive past a gap in their order's versions.
func New(cfg *Config) (*Consumer, error) {
	log := slog.Default()
	if cfg != nil && cfg.Logger != nil {
		log = cfg.Logger
	}
	c, err := inbox.New(&inbox.Config{
		Name:   ConsumerName,
		Accept: []inbox.Schema{{EventType: orders.EventOrderPlaced, SchemaVersion: 1}},
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	return &Consumer{inbox: c}, nil
}

// Inbox returns the inbox consumer, for its Stats, its quarantine and Replay.
func (c *Consumer) Inbox() *inbox.Consumer { return c.inbox }

// Process applies msg once: it records the event in the inbox and runs [Consumer.Handle]
// in one transaction on db. Ack the broker once it returned a nil error, whatever the
// Outcome (a redelivered event is a [inbox.Duplicate]); on an error nothing was
// recorded: let the broker redeliver.
func (c *Consumer) Process(ctx context.Context, db outbox.TxBeginner, msg outbox.Message) (inbox.Result, error) {
	return c.inbox.Process(ctx, db, msg, c.Handle)
}

// Handle is the [inbox.Handler]: it takes the order's quantity off its SKU's stock in
// tx. A payload that is not an OrderPlaced, or a SKU the stock table does not have, is
// a permanent error (the inbox quarantines the event: restock the SKU, then replay
// it); a failure of the database is returned as it is, for a retry.
func (c *Consumer) Handle(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
	var e orders.OrderPlaced
	if err := json.Unmarshal(msg.Payload, &e); err != nil {
		return outbox.Permanent(fmt.Errorf("inventory: event %s: decode the OrderPlaced payload: %w", msg.ID, err))
	}
	if e.SKU == "" || e.Quantity < 1 {
		return outbox.Permanent(fmt.Errorf("inventory: event %s: the payload has sku %q and quantity %d", msg.ID, e.SKU, e.Quantity))
	}
	var left int
	err := tx.QueryRow(ctx, takeStockSQL, e.SKU, e.Quantity).Scan(&left)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return outbox.Permanent(fmt.Errorf("inventory: event %s: order %s: %w %q", msg.ID, e.OrderID, ErrUnknownSKU, e.SKU))
	case err != nil:
		return fmt.Errorf("inventory: take %d of sku %q: %w", e.Quantity, e.SKU, err)
	}
	return nil
}
