package outbox

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Tx is the caller's open transaction, as Enqueue takes it. It is sealed: the only
// ways to make one are [PgxTx] and [SQLTx], which take a transaction type, so a pool
// or a plain connection (which would write outside the business transaction) is
// refused at compile time.
type Tx interface {
	queryStrings(ctx context.Context, sql string, args ...any) ([]string, error)
}

// PgxTx adapts a pgx transaction (from pgx.Conn.Begin or pgxpool.Pool.Begin).
func PgxTx(tx pgx.Tx) Tx { return pgxTx{tx} }

// SQLTx adapts a database/sql transaction. The driver must be PostgreSQL's (pgx's
// stdlib driver or lib/pq); Enqueue passes only text parameters, so any works.
func SQLTx(tx *sql.Tx) Tx { return sqlTx{tx} }

var errNilTx = errors.New("enqueue: tx is nil; pass the caller's open transaction")

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) queryStrings(ctx context.Context, q string, args ...any) ([]string, error) {
	if t.tx == nil {
		return nil, errNilTx
	}
	rows, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) queryStrings(ctx context.Context, q string, args ...any) ([]string, error) {
	if t.tx == nil {
		return nil, errNilTx
	}
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
