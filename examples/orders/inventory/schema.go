package inventory

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/outboxmigrate"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// query returns the text of sql/name.sql.
func query(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("inventory: no query %s: %v", name, err))
	}
	return string(b)
}

var (
	schemaSQL    = query("schema")
	takeStockSQL = query("take_stock")
	seedStockSQL = query("seed_stock")
	getStockSQL  = query("get_stock")
)

// ErrUnknownSKU is returned by [Stock] for a SKU the stock table has no row for.
var ErrUnknownSKU = errors.New("inventory: unknown sku")

// Migrate creates what the consumer needs in the database of pool: the inbox tables
// (outboxmigrate's inbox set alone: this service only consumes) and the stock table.
// It is idempotent and safe from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := outboxmigrate.New(&outboxmigrate.Config{Sets: []outboxmigrate.Set{outboxmigrate.SetInbox}})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("inventory: create the stock table: %w", err)
	}
	return nil
}

// Execer runs a statement: *pgxpool.Pool, *pgx.Conn and pgx.Tx are Execers.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Seed gives sku onHand units unless it is stocked already (so a restart does not
// reset it).
func Seed(ctx context.Context, db Execer, sku string, onHand int) error {
	if _, err := db.Exec(ctx, seedStockSQL, sku, onHand); err != nil {
		return fmt.Errorf("inventory: seed sku %q: %w", sku, err)
	}
	return nil
}

// Stock returns the units of sku on hand, or [ErrUnknownSKU].
func Stock(ctx context.Context, db Execer, sku string) (int, error) {
	var n int
	err := db.QueryRow(ctx, getStockSQL, sku).Scan(&n)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("%w %q", ErrUnknownSKU, sku)
	case err != nil:
		return 0, fmt.Errorf("inventory: read the stock of sku %q: %w", sku, err)
	}
	return n, nil
}
