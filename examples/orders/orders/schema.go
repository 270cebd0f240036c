package orders

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/outboxmigrate"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// query returns the text of sql/name.sql.
func query(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("orders: no query %s: %v", name, err))
	}
	return string(b)
}

var (
	schemaSQL      = query("schema")
	insertOrderSQL = query("insert_order")
	getOrderSQL    = query("get_order")
)

// Schema returns the SQL that creates the orders table (sql/schema.sql), for a
// migration tool of your own.
func Schema() string { return schemaSQL }

// Migrate creates what the service needs in the database of pool: the outbox schema
// (outboxmigrate, every set: the service produces) and the orders table. It is
// idempotent and safe from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := outboxmigrate.New(nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("orders: create the orders table: %w", err)
	}
	return nil
}
