package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// followLoopBatch is how many rows one statement of the follow loop takes.
const followLoopBatch = 1000

// followLoopSQL is the plain-SQL follow loop's statement: the oldest available pending
// rows, locked and marked published in one autocommit statement, as the simplest relays
// (and the tutorials' pollers) do.
const followLoopSQL = `UPDATE outbox.events SET published_at = now() WHERE seq IN (
	SELECT seq FROM outbox.events WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now()
	ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id`

// followLoop is the peer the relay's latency is compared with: poll every interval, take
// what is pending (again at once while a poll fills a whole statement), and record a
// receipt for each row when its statement returns — the moment such a loop would hand
// it to a broker. It returns the number of statements it ran.
func followLoop(ctx context.Context, pool *pgxpool.Pool, interval time.Duration, rec *recordSink) (int64, error) {
	var statements int64
	for ctx.Err() == nil {
		rows, err := pool.Query(ctx, followLoopSQL, followLoopBatch)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return statements, fmt.Errorf("follow loop: %w", err)
		}
		var ids []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return statements, fmt.Errorf("follow loop: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil && ctx.Err() == nil {
			return statements, fmt.Errorf("follow loop: %w", err)
		}
		statements++
		rec.received(ids, time.Now().UnixNano())
		if len(ids) < followLoopBatch {
			if err := sleepCtx(ctx, interval); err != nil {
				break
			}
		}
	}
	return statements, nil
}
