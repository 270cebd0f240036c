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
	// encode returns the parameters of the enqueue statement for validated events
	// (defaults filled), in the encoding that suits this driver; their type says which
	// statement runs. lock: take the aggregate locks.
	encode(events []Event, lock bool) enqueueParams
	queryStrings(ctx context.Context, sql string, args ...any) ([]string, error)
	exec(ctx context.Context, sql string, args ...any) error
}

// PgxTx adapts a pgx transaction (from pgx.Conn.Begin or pgxpool.Pool.Begin).
func PgxTx(tx pgx.Tx) Tx { return pgxTx{tx} }

// SQLTx adapts a database/sql transaction. The driver must be PostgreSQL's (pgx's
// stdlib driver or lib/pq); Enqueue passes only the standard driver.Value types
// (strings, integers, booleans, []byte, time.Time), so any works.
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

// encode: one event as scalar parameters, more as typed arrays in pgx's binary format.
// Ids go as [16]byte, which pgx encodes directly (a uuid.UUID would take the slower
// driver.Valuer path).
func (pgxTx) encode(events []Event, lock bool) enqueueParams {
	if len(events) == 1 {
		return newOneParams(&events[0], [16]byte(events[0].ID), lock)
	}
	return newArraysParams(events, lock)
}

func (t pgxTx) exec(ctx context.Context, q string, args ...any) error {
	if t.tx == nil {
		return errNilTx
	}
	_, err := t.tx.Exec(ctx, q, args...)
	return err
}

type sqlTx struct{ tx *sql.Tx }

// encode: one event as scalar parameters, more as one JSON array (a text parameter any
// driver can pass). The id goes in its text form, a string any driver passes.
func (sqlTx) encode(events []Event, lock bool) enqueueParams {
	if len(events) == 1 {
		return newOneParams(&events[0], events[0].ID.String(), lock)
	}
	return newJSONParams(events, lock)
}

func (t sqlTx) exec(ctx context.Context, q string, args ...any) error {
	if t.tx == nil {
		return errNilTx
	}
	_, err := t.tx.ExecContext(ctx, q, args...)
	return err
}

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
