package outbox

import (
	"context"
	"errors"
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

// ErrAfterCommitInSavepoint is returned by [WithTx] when it is given after-commit hooks
// and a pgx.Tx: on a transaction, WithTx runs fn in a savepoint, whose release is not a
// commit — the hooks would run while the enclosing transaction can still roll back.
var ErrAfterCommitInSavepoint = errors.New("outbox: WithTx on a pgx.Tx runs a savepoint, not a transaction: after-commit hooks would run before the commit; call the hooks after the enclosing transaction commits (pass them to the WithTx that begins it)")

// WithTx runs fn in a transaction begun on db, commits it when fn returns nil and rolls
// it back otherwise (also when fn panics). After a successful commit it calls each of
// afterCommit, outside the transaction.
//
// Given a pgx.Tx, WithTx runs fn in a savepoint of it; then it refuses after-commit
// hooks ([ErrAfterCommitInSavepoint]), before running fn.
//
// Use [PgxTx](tx) to Enqueue inside fn.
func WithTx(ctx context.Context, db TxBeginner, fn func(tx pgx.Tx) error, afterCommit ...AfterCommitFunc) error {
	if _, savepoint := db.(pgx.Tx); savepoint && len(afterCommit) > 0 {
		return ErrAfterCommitInSavepoint
	}
	if err := pgx.BeginFunc(ctx, db, fn); err != nil {
		return fmt.Errorf("outbox: transaction: %w", err)
	}
	for _, f := range afterCommit {
		f(ctx)
	}
	return nil
}
