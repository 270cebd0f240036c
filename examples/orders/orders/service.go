package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
)

// ErrNotFound is returned by [Service.Order] for an id no order has.
var ErrNotFound = errors.New("orders: no such order")

// ErrExists is returned by [Service.PlaceOrder] for an order whose caller-set ID an
// order has already: nothing was written.
var ErrExists = errors.New("orders: an order with this id exists")

// Config configures a [Service]. The zero value (or nil) means the defaults.
type Config struct {
	// Notifier wakes the relays once an order's transaction has committed. Default: a
	// Notifier of the service's own on its pool (schema "outbox"), closed by
	// [Service.Close]. Share one when several services write through one pool.
	Notifier *outbox.Notifier
	// Writer enqueues the events. Default: outbox.NewWriter(nil) (schema "outbox").
	Writer *outbox.Writer
}

// Service places orders. It is safe for concurrent use.
type Service struct {
	pool        *pgxpool.Pool
	writer      *outbox.Writer
	notifier    *outbox.Notifier
	ownNotifier bool
}

// NewService returns a Service writing to pool, which must have been migrated
// ([Migrate]). Close it when done.
func NewService(pool *pgxpool.Pool, cfg *Config) (*Service, error) {
	if pool == nil {
		return nil, errors.New("orders: NewService: pool is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	s := &Service{pool: pool, writer: c.Writer, notifier: c.Notifier}
	if s.writer == nil {
		w, err := outbox.NewWriter(nil)
		if err != nil {
			return nil, err
		}
		s.writer = w
	}
	if s.notifier == nil {
		n, err := outbox.NewNotifier(pool, nil)
		if err != nil {
			return nil, err
		}
		s.notifier, s.ownNotifier = n, true
	}
	return s, nil
}

// Close stops the service's own Notifier (sending a wake-up still pending). It does
// not close the pool or a Notifier given in Config.
func (s *Service) Close() {
	if s.ownNotifier {
		s.notifier.Close()
	}
}

// PlaceOrder validates o, then inserts it and enqueues its [OrderPlaced] event in one
// transaction: both commit, or neither does. After the commit it asks the Notifier to
// wake the relays. It returns the order as stored (ID, CreatedAt set). An invalid
// order is refused with a [*ValidationError] before any SQL runs.
//
// A zero o.ID gets a new UUIDv7. A caller that sets it (to retry a request safely)
// gets [ErrExists] for an id that exists, and nothing is written twice.
func (s *Service) PlaceOrder(ctx context.Context, o Order) (Order, error) {
	if err := Validate(o); err != nil {
		return Order{}, err
	}
	if o.ID == uuid.Nil {
		o.ID = outbox.NewID()
	}
	err := outbox.WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, insertOrderSQL, o.ID, o.Customer, o.SKU, o.Quantity).Scan(&o.CreatedAt)
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "orders_pkey" {
			return ErrExists
		}
		if err != nil {
			return fmt.Errorf("insert the order: %w", err)
		}
		event, err := PlacedEvent(o)
		if err != nil {
			return err
		}
		return s.writer.Enqueue(ctx, outbox.PgxTx(tx), event)
	}, s.notifier.AfterCommit)
	if err != nil {
		return Order{}, fmt.Errorf("orders: place order %s: %w", o.ID, err)
	}
	return o, nil
}

// PlacedEvent returns the order.placed event of o, as PlaceOrder enqueues it: for
// writers of their own (see package sqlcwrite).
func PlacedEvent(o Order) (outbox.Event, error) {
	payload, err := json.Marshal(OrderPlaced{
		OrderID: o.ID, Customer: o.Customer, SKU: o.SKU, Quantity: o.Quantity, PlacedAt: o.CreatedAt,
	})
	if err != nil {
		return outbox.Event{}, fmt.Errorf("encode the OrderPlaced payload: %w", err)
	}
	return outbox.Event{
		AggregateType:    AggregateType,
		AggregateID:      o.ID.String(),
		AggregateVersion: OrderPlacedVersion,
		EventType:        EventOrderPlaced,
		Payload:          payload,
	}, nil
}

// Order returns the order with id, or [ErrNotFound].
func (s *Service) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	var o Order
	err := s.pool.QueryRow(ctx, getOrderSQL, id).Scan(&o.ID, &o.Customer, &o.SKU, &o.Quantity, &o.CreatedAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Order{}, ErrNotFound
	case err != nil:
		return Order{}, fmt.Errorf("orders: read order %s: %w", id, err)
	}
	return o, nil
}
