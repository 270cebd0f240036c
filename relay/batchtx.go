package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// batchTx is a batch's transaction on one pool connection. Its BEGIN travels in the
// claim's round trip and its COMMIT in the last statements', so a batch costs two round
// trips, not four (BEGIN, claim, check, COMMIT): under load every round trip waits for a
// server process to be scheduled, and small batches (a steady trickle) are mostly round
// trips.
type batchTx struct {
	conn *pgxpool.Conn
	open bool // BEGIN may have run and no COMMIT or ROLLBACK has
}

// begin takes a pool connection for a batch's transaction.
func (b *batcher) begin(ctx context.Context) (*batchTx, error) {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin claim: %w", err)
	}
	return &batchTx{conn: conn}, nil
}

// begin sends BEGIN followed by b's statements, and returns the results (BEGIN's first).
func (t *batchTx) begin(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	b.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: "BEGIN"}}, b.QueuedQueries...)
	t.open = true
	return t.conn.SendBatch(ctx, b)
}

// send sends b, whose statements run inside the transaction, and returns the results.
func (t *batchTx) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

// committed records that a COMMIT succeeded.
func (t *batchTx) committed() { t.open = false }

// rollback ends the transaction, keeping nothing.
func (t *batchTx) rollback(ctx context.Context) error {
	if !t.open {
		return nil
	}
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		return fmt.Errorf("roll back batch: %w", err)
	}
	t.open = false
	return nil
}

// end rolls back what is still open and gives the connection back. A connection whose
// rollback failed is closed rather than returned to the pool inside a transaction.
func (t *batchTx) end() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.rollback(ctx); err != nil {
		_ = t.conn.Conn().Close(ctx)
	}
	t.conn.Release()
}

// errFenced reports that fence.sql found a lease of the batch taken over: it divides by
// zero on purpose, so the COMMIT queued after it in the same round trip does not run.
func errFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}
