package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox"
)

var errSQLNoRows = sql.ErrNoRows

// SQLHandler is [Handler] for database/sql: its database work goes through tx.
type SQLHandler func(ctx context.Context, tx *sql.Tx, msg outbox.Message) error

// SQLBeginner begins database/sql transactions: *sql.DB and *sql.Conn do.
type SQLBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// ProcessSQL is [Consumer.Process] for database/sql (the driver must be PostgreSQL's:
// pgx's stdlib or lib/pq): it begins a transaction on db, processes msg with h and
// commits. Ack the broker after it returned a nil error.
func (c *Consumer) ProcessSQL(ctx context.Context, db SQLBeginner, msg outbox.Message, h SQLHandler) (Result, error) {
	start := time.Now()
	if err := checkArgs(db == nil, h == nil); err != nil {
		return Result{}, err
	}
	if err := validateMessage(&msg); err != nil {
		return c.invalid(start, msg, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return c.finish(ctx, start, msg, Result{}, nil, fmt.Errorf("begin: %w", err))
	}
	var st tally
	run := func(ctx context.Context, m outbox.Message) error { return h(ctx, tx, m) }
	res, err := c.process(ctx, sqlConn{tx}, msg, run, &st, nil)
	if err != nil {
		return c.finish(ctx, start, msg, Result{}, &st, errors.Join(err, rollback(tx)))
	}
	if err := tx.Commit(); err != nil {
		return c.finish(ctx, start, msg, Result{}, &st, fmt.Errorf("commit: %w", err))
	}
	return c.finish(ctx, start, msg, res, &st, nil)
}

// ProcessSQLTx is [Consumer.ProcessSQL] inside the caller's open transaction, in a
// savepoint of it: on an error the savepoint is rolled back and tx stays usable. Nothing
// is durable until the caller commits: ack after that commit.
func (c *Consumer) ProcessSQLTx(ctx context.Context, tx *sql.Tx, msg outbox.Message, h SQLHandler) (Result, error) {
	start := time.Now()
	if err := checkArgs(tx == nil, h == nil); err != nil {
		return Result{}, err
	}
	if err := validateMessage(&msg); err != nil {
		return c.invalid(start, msg, err)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT outbox_inbox_process"); err != nil {
		return c.finish(ctx, start, msg, Result{}, nil, fmt.Errorf("open a savepoint: %w", err))
	}
	var st tally
	run := func(ctx context.Context, m outbox.Message) error { return h(ctx, tx, m) }
	res, err := c.process(ctx, sqlConn{tx}, msg, run, &st, nil)
	if err != nil {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT outbox_inbox_process"); rerr != nil {
			err = errors.Join(err, fmt.Errorf("roll back the savepoint: %w", rerr))
		}
		return c.finish(ctx, start, msg, Result{}, &st, err)
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT outbox_inbox_process"); err != nil {
		return c.finish(ctx, start, msg, Result{}, &st, fmt.Errorf("release the savepoint: %w", err))
	}
	return c.finish(ctx, start, msg, res, &st, nil)
}

func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("roll back: %w", err)
	}
	return nil
}
