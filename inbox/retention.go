package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs statements: *pgxpool.Pool, *pgx.Conn and pgx.Tx all do.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PurgeOptions configures [Consumer.Purge].
type PurgeOptions struct {
	// OlderThan is the age past which dedup rows are deleted. Required. Keep it longer
	// than any redelivery can come late: the relay's retention and replay window plus
	// the broker's redelivery horizon. A duplicate arriving after its row was purged is
	// applied again (or, for a versioned event, found stale).
	OlderThan time.Duration
	// BatchSize is how many rows one statement deletes, 1 to 100000. Default 1000.
	BatchSize int
}

// purgeParams are inbox_purge.sql's.
type purgeParams struct {
	Consumer  string    `sql:"consumer"`
	Cutoff    time.Time `sql:"cutoff"` // rows processed before it go
	BatchSize int       `sql:"batch_size"`
}

// Purge deletes the consumer's dedup rows of applied and stale events older than
// opts.OlderThan, in batches (one short statement each, so it never holds many locks for
// long), until none is left or ctx is done, and returns how many it deleted. The rows of
// parked and quarantined events are kept while those events wait.
func (c *Consumer) Purge(ctx context.Context, db Execer, opts PurgeOptions) (int64, error) {
	if db == nil {
		return 0, errors.New("inbox: db is nil")
	}
	if opts.OlderThan <= 0 {
		return 0, fmt.Errorf("inbox: PurgeOptions.OlderThan is %s; it must be positive", opts.OlderThan)
	}
	batch := opts.BatchSize
	if batch == 0 {
		batch = 1000
	}
	if batch < 1 || batch > 100000 {
		return 0, fmt.Errorf("inbox: PurgeOptions.BatchSize is %d; it must be between 1 and 100000", batch)
	}
	p := purgeParams{Consumer: c.name, Cutoff: time.Now().Add(-opts.OlderThan), BatchSize: batch}
	args := c.q.purge.Args(&p)
	var total int64
	for {
		tag, err := db.Exec(ctx, c.q.purge.SQL, args...)
		if err != nil {
			return total, fmt.Errorf("inbox: purge dedup rows of %s: %w", c.name, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
