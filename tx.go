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
	// insert writes validated events with w's statement for this driver and returns
	// the ids inserted (those skipped by ON CONFLICT are missing).
	insert(ctx context.Context, w *Writer, events []Event) ([]string, error)
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

// insert sends the events as typed arrays in pgx's binary format.
func (t pgxTx) insert(ctx context.Context, w *Writer, events []Event) ([]string, error) {
	a := newEventArrays(events)
	return t.queryStrings(ctx, w.insertArraysSQL, a.ids, a.aggregateTypes, a.aggregateIDs, a.versions, a.eventTypes,
		a.schemaVersions, a.topics, a.headers, a.contentTypes, a.payloads, a.payloadBytes, a.traceParents, a.availableAt, w.lock)
}

type sqlTx struct{ tx *sql.Tx }

// insert sends the events as one JSON array, a text parameter any driver can pass.
func (t sqlTx) insert(ctx context.Context, w *Writer, events []Event) ([]string, error) {
	buf := make([]byte, 0, 256*len(events))
	buf = append(buf, '[')
	for i := range events {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendRow(buf, i, &events[i])
	}
	buf = append(buf, ']')
	return t.queryStrings(ctx, w.insertJSONSQL, string(buf), w.lock)
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
