package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/pgtest"
)

// db returns a pool on a fresh migrated database with an effects table: the handler's
// business work, one row per application (no unique key, so a second application of an
// event shows as a second row), n in commit-ish order of insertion.
func db(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE effects (
		n bigserial PRIMARY KEY, consumer text NOT NULL, event_id uuid NOT NULL, aggregate_id text NOT NULL, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool
}

func newConsumer(t *testing.T, cfg *inbox.Config) *inbox.Consumer {
	t.Helper()
	if cfg == nil {
		cfg = &inbox.Config{}
	}
	if cfg.Name == "" {
		cfg.Name = "billing"
	}
	c, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// effect is a handler that records the message in effects.
func effect(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (consumer, event_id, aggregate_id, version) VALUES ('billing', $1, $2, $3)`,
		m.ID, m.AggregateID, m.AggregateVersion)
	return err
}

func msg(aggregateID string, version int64) outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), AggregateType: "order", AggregateID: aggregateID, AggregateVersion: version,
		EventType: "order.changed", SchemaVersion: 1, ContentType: outbox.ContentTypeJSON,
		Payload: fmt.Appendf(nil, `{"v": %d}`, version), Headers: map[string]string{"x-v": fmt.Sprint(version)},
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond), Attempt: 1,
	}
}

func process(t *testing.T, c *inbox.Consumer, pool *pgxpool.Pool, m outbox.Message) inbox.Result {
	t.Helper()
	res, err := c.Process(context.Background(), pool, m, effect)
	if err != nil {
		t.Fatalf("Process(%s v%d): %v", m.AggregateID, m.AggregateVersion, err)
	}
	return res
}

func wantOutcome(t *testing.T, res inbox.Result, want inbox.Outcome) {
	t.Helper()
	if res.Outcome != want {
		t.Fatalf("outcome %s (%+v), want %s", res.Outcome, res, want)
	}
}

// versions returns the versions applied to an aggregate, in the order they were applied.
func versions(t *testing.T, pool *pgxpool.Pool, aggregateID string) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT version FROM effects WHERE aggregate_id = $1 ORDER BY n`, aggregateID)
	if err != nil {
		t.Fatal(err)
	}
	v, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func effectsOf(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE event_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func lastVersion(t *testing.T, pool *pgxpool.Pool, aggregateID string) int64 {
	t.Helper()
	var v int64
	err := pool.QueryRow(context.Background(), `SELECT last_version FROM outbox.inbox_versions WHERE aggregate_id = $1`, aggregateID).Scan(&v)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitFor polls cond until it holds or the deadline passes (a condition, not a sleep).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
