package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TxBeginner starts pgx transactions: *pgxpool.Pool, *pgx.Conn and pgx.Tx (a savepoint) all do.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// AfterCommitFunc is called by [WithTx] once the transaction has committed, e.g. to
// wake a relay. It runs outside the transaction and cannot undo it; an error it returns
// is not returned by WithTx.
type AfterCommitFunc func(ctx context.Context)

// WithTx runs fn in a transaction begun on db, commits it when fn returns nil and rolls
// it back otherwise (also when fn panics). After a successful commit it calls each of
// afterCommit, outside the transaction.
//
// Use [PgxTx](tx) to Enqueue inside fn.
func WithTx(ctx context.Context, db TxBeginner, fn func(tx pgx.Tx) error, afterCommit ...AfterCommitFunc) error {
	if err := pgx.BeginFunc(ctx, db, fn); err != nil {
		return fmt.Errorf("outbox: transaction: %w", err)
	}
	for _, f := range afterCommit {
		f(ctx)
	}
	return nil
}
