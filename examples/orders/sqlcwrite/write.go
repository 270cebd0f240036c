package sqlcwrite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/examples/orders/sqlcwrite/db"
)

// Writer places orders through database/sql. It is safe for concurrent use.
type Writer struct {
	db          *sql.DB
	afterCommit outbox.AfterCommitFunc
}

// New returns a Writer on db, a database/sql handle of a PostgreSQL driver (pgx's
// stdlib or lib/pq) on a database migrated by orders.Migrate. afterCommit, when not
// nil, is called after each commit: pass an outbox.Notifier's AfterCommit to wake the
// relays (without one they find the events at their next poll).
func New(sqlDB *sql.DB, afterCommit outbox.AfterCommitFunc) (*Writer, error) {
	if sqlDB == nil {
		return nil, errors.New("sqlcwrite: New: db is nil")
	}
	return &Writer{db: sqlDB, afterCommit: afterCommit}, nil
}

// PlaceOrder is orders.Service.PlaceOrder on database/sql: it validates o, then in one
// transaction inserts it, takes its aggregate's lock and inserts its order.placed
// event; both rows commit, or neither does.
func (w *Writer) PlaceOrder(ctx context.Context, o orders.Order) (orders.Order, error) {
	if err := orders.Validate(o); err != nil {
		return orders.Order{}, err
	}
	if o.ID == uuid.Nil {
		o.ID = outbox.NewID()
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return orders.Order{}, fmt.Errorf("sqlcwrite: place order %s: begin: %w", o.ID, err)
	}
	defer func() { _ = tx.Rollback() }() // after Commit: ErrTxDone, ignored
	if o, err = InsertOrder(ctx, tx, o); err != nil {
		return orders.Order{}, err
	}
	if err := tx.Commit(); err != nil {
		return orders.Order{}, fmt.Errorf("sqlcwrite: place order %s: commit: %w", o.ID, err)
	}
	if w.afterCommit != nil {
		w.afterCommit(ctx)
	}
	return o, nil
}

// InsertOrder writes o (valid, ID set) and its order.placed event in the caller's tx,
// with the sqlc-generated queries; it neither commits nor rolls back.
func InsertOrder(ctx context.Context, tx *sql.Tx, o orders.Order) (orders.Order, error) {
	q := db.New(tx)
	created, err := q.InsertOrder(ctx, db.InsertOrderParams{
		ID: o.ID, Customer: o.Customer, Sku: o.SKU, Quantity: int32(o.Quantity),
	})
	if err != nil {
		return orders.Order{}, fmt.Errorf("sqlcwrite: place order %s: insert the order: %w", o.ID, err)
	}
	o.CreatedAt = created
	e, err := orders.PlacedEvent(o)
	if err != nil {
		return orders.Order{}, err
	}
	if err := InsertEvent(ctx, q, e); err != nil {
		return orders.Order{}, fmt.Errorf("sqlcwrite: place order %s: %w", o.ID, err)
	}
	return o, nil
}

// InsertEvent writes e with the generated queries: the aggregate lock, then the row,
// as outbox.Enqueue does. e's ID, when zero, becomes a new UUIDv7, its SchemaVersion
// 1 and its ContentType JSON, as in Enqueue. It writes AggregateType, AggregateID,
// AggregateVersion, EventType, SchemaVersion, ContentType and a JSON Payload; an event
// with Topic, Headers, TraceParent, AvailableAt or a non-JSON payload needs a query
// with those columns too, and is refused here.
func InsertEvent(ctx context.Context, q *db.Queries, e outbox.Event) error {
	switch {
	case e.Topic != "":
		return errors.New("insert event: Topic is not written by this query")
	case len(e.Headers) > 0:
		return errors.New("insert event: Headers are not written by this query")
	case e.TraceParent != "":
		return errors.New("insert event: TraceParent is not written by this query")
	case !e.AvailableAt.IsZero():
		return errors.New("insert event: AvailableAt is not written by this query")
	case e.ContentType != "" && e.ContentType != outbox.ContentTypeJSON:
		return fmt.Errorf("insert event: ContentType %q: this query writes JSON payloads only", e.ContentType)
	}
	if e.ID == uuid.Nil {
		e.ID = outbox.NewID()
	}
	if e.SchemaVersion == 0 {
		e.SchemaVersion = 1
	}
	if err := q.LockAggregate(ctx, db.LockAggregateParams{AggregateType: e.AggregateType, AggregateID: e.AggregateID}); err != nil {
		return fmt.Errorf("insert event: lock aggregate %s %s: %w", e.AggregateType, e.AggregateID, err)
	}
	err := q.InsertEvent(ctx, db.InsertEventParams{
		ID:               e.ID,
		AggregateType:    e.AggregateType,
		AggregateID:      e.AggregateID,
		AggregateVersion: sql.NullInt64{Int64: e.AggregateVersion, Valid: e.AggregateVersion > 0},
		EventType:        e.EventType,
		SchemaVersion:    int32(e.SchemaVersion),
		ContentType:      outbox.ContentTypeJSON,
		Payload:          e.Payload,
	})
	if err != nil {
		return fmt.Errorf("insert event %s: %w", e.ID, err)
	}
	return nil
}
