package benchdb

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/outboxmigrate"
)

// ResetOutbox drops the outbox schema with everything in it (events, relay_config,
// leases, the notify trigger) and migrates it again, so a measurement starts on a
// freshly migrated, empty schema.
func ResetOutbox(ctx context.Context, pool *pgxpool.Pool) error {
	return ResetSchema(ctx, pool, "outbox")
}

// ResetSchema is ResetOutbox for the outbox schema named schema (a plain identifier).
func ResetSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	m, err := outboxmigrate.New(&outboxmigrate.Config{Schema: schema})
	if err != nil {
		return fmt.Errorf("new migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	return nil
}

// Fill writes n events with COPY, as Enqueue would write them (UUIDv7 ids in write
// order, JSON [Payload], default headers and content type): event i (0-based) belongs
// to aggregate account/(i mod aggregates + 1), so every aggregate's events are spread
// evenly over the whole seq range. With published set, the events are written already
// published (published_at = now), as retained rows.
func Fill(ctx context.Context, pool *pgxpool.Pool, n, aggregates int, published bool) error {
	cols := []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload"}
	var publishedAt time.Time
	if published {
		cols = append(cols, "published_at")
		publishedAt = time.Now()
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new event id: %w", err)
		}
		row := []any{id, "account", strconv.Itoa(i%aggregates + 1), "account.credited", Payload}
		if published {
			row = append(row, publishedAt)
		}
		i++
		return row, nil
	})
	copied, err := pool.CopyFrom(ctx, pgx.Identifier{"outbox", "events"}, cols, src)
	if err != nil {
		return fmt.Errorf("copy %d events: %w", n, err)
	}
	if copied != int64(n) {
		return fmt.Errorf("copy events: wrote %d of %d", copied, n)
	}
	return nil
}

// Settle vacuums and analyzes the events table and takes a checkpoint, so that a
// measurement neither sets hint bits nor pays for a checkpoint on behalf of the fill.
func Settle(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []string{"VACUUM ANALYZE outbox.events", "CHECKPOINT"} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("settle: %s: %w", q, err)
		}
	}
	return nil
}
