package relay

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// purger applies the retention of published events.
type purger struct {
	pool  *pgxpool.Pool
	q     *queries
	cfg   *Config
	log   *slog.Logger
	stats *counters
}

// run purges every Retention.Interval until ctx is done.
func (r *purger) run(ctx context.Context) {
	for !wait(ctx, r.cfg.Retention.Interval, nil) {
		if n, err := r.purge(ctx); err != nil {
			if ctx.Err() == nil {
				r.log.WarnContext(ctx, "retention purge failed", slog.Any("error", err))
			}
		} else if n > 0 {
			r.log.InfoContext(ctx, "retention purge", slog.Int64("purged", n))
		}
	}
}

// Purge removes (or, in KeepThenArchive mode, archives) events published more than
// Retention.Keep ago by the database's clock, walking seq in key ranges of
// Retention.BatchSize, one short transaction per range (each with a BatchTimeout), and returns how many it removed. One relay purges at a time:
// each range's transaction first takes a transaction-scoped advisory lock, and a relay
// that does not get it stops (another is purging). Dead and pending events are never
// purged. The relay calls Purge every Retention.Interval; call it to purge now.
func (r *Relay) Purge(ctx context.Context) (int64, error) { return r.purger.purge(ctx) }

// purgeParams are purge.sql's: one key range [From, From + Size) of seq.
type purgeParams struct {
	From    int64 `sql:"from"`
	Size    int   `sql:"size"`
	KeepMS  int64 `sql:"keep_ms"` // the cutoff is the database's now() minus this
	Archive bool  `sql:"archive"`
}

// purgeNextParams are purge_next.sql's.
type purgeNextParams struct {
	From int64 `sql:"from"`
}

// purgeLockParams are purge_lock.sql's.
type purgeLockParams struct {
	Schema string `sql:"schema"`
}

func (r *purger) purge(ctx context.Context) (int64, error) {
	if r.cfg.Retention.Mode == DeleteOnPublish {
		return 0, nil
	}
	next := func(from int64) []any { return r.q.purgeNext.Args(&purgeNextParams{From: from}) }
	lock := r.q.purgeLock.Args(&purgeLockParams{Schema: r.cfg.Schema})
	var (
		total int64
		start *int64
	)
	startCtx, cancel := context.WithTimeout(ctx, r.cfg.BatchTimeout)
	err := r.pool.QueryRow(startCtx, r.q.purgeNext.SQL, next(0)...).Scan(&start)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("purge: find start: %w", err)
	}
	for start != nil && ctx.Err() == nil {
		var (
			deleted, archived int64
			newer, locked     bool
			following         *int64
		)
		p := purgeParams{
			From: *start, Size: r.cfg.Retention.BatchSize,
			KeepMS: r.cfg.Retention.Keep.Milliseconds(), Archive: r.cfg.Retention.Mode == KeepThenArchive,
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.BatchTimeout) // one range, one short transaction
		err := pgx.BeginFunc(rctx, r.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(rctx, r.q.purgeLock.SQL, lock...).Scan(&locked); err != nil || !locked {
				return err
			}
			if err := tx.QueryRow(rctx, r.q.purge.SQL, r.q.purge.Args(&p)...).Scan(&deleted, &archived, &newer); err != nil {
				return err
			}
			return tx.QueryRow(rctx, r.q.purgeNext.SQL, next(p.From+int64(p.Size))...).Scan(&following)
		})
		cancel()
		if err != nil {
			return total, fmt.Errorf("purge range from seq %d: %w", *start, err)
		}
		if !locked {
			return total, nil // another relay is purging
		}
		total += deleted
		r.stats.purged.Add(deleted)
		if newer {
			break
		}
		start = following
	}
	return total, nil
}
