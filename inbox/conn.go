package inbox

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

// conn is the open transaction Process works in, whichever the driver.
type conn interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	queryRow(ctx context.Context, q string, args ...any) row
	query(ctx context.Context, q string, args ...any) (rows, error)
}

type row interface{ Scan(dest ...any) error }

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type pgxConn struct{ tx pgx.Tx }

func (c pgxConn) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := c.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (c pgxConn) queryRow(ctx context.Context, q string, args ...any) row {
	return c.tx.QueryRow(ctx, q, args...)
}

func (c pgxConn) query(ctx context.Context, q string, args ...any) (rows, error) {
	return c.tx.Query(ctx, q, args...) //nolint:sqlclosecheck // an adapter: the caller closes the rows
}

type sqlConn struct{ tx *sql.Tx }

func (c sqlConn) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := c.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqlConn) queryRow(ctx context.Context, q string, args ...any) row {
	return c.tx.QueryRowContext(ctx, q, args...)
}

func (c sqlConn) query(ctx context.Context, q string, args ...any) (rows, error) {
	r, err := c.tx.QueryContext(ctx, q, args...) //nolint:rowserrcheck // an adapter: the caller checks Err
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }
