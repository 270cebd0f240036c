package orders_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/examples/orders/orders"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// newDB returns a pool on a fresh database migrated by orders.Migrate.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.PoolFor(t, pgtest.ConnString(t, &pgtest.Options{Empty: true}))
	if err := orders.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// newService returns a Service on pool, closed when t ends.
func newService(t *testing.T, pool *pgxpool.Pool) *orders.Service {
	t.Helper()
	s, err := orders.NewService(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func count(t *testing.T, pool *pgxpool.Pool, q string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
