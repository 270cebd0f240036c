package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/relay"
	"github.com/outboxkit/outbox/sink/memsink"
)

// A discarded event no longer holds its aggregate: the later events went out past it.
// Replaying it would publish it after them, so Replay refuses it — and, asked for a
// discarded and a dead event together, replays neither — with ErrDiscardedEvent.
func TestReplayRefusesDiscardedEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	enqueue(t, pool, []string{"gone", "held"}, 2)
	sink := &memsink.Sink{FailFunc: func(m outbox.Message) error {
		if m.AggregateVersion == 1 {
			return outbox.Permanent(errors.New("refused"))
		}
		return nil
	}}
	start(t, newRelay(t, pool, sink, fastConfig()))
	waitSQL(t, pool, 10*time.Second, 2, `SELECT count(*) FROM outbox.dead_letters`)
	idOf := func(agg string, version int) uuid.UUID {
		var id uuid.UUID
		if err := pool.QueryRow(ctx, `SELECT id FROM outbox.events WHERE aggregate_id = $1 AND aggregate_version = $2`, agg, version).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	gone, held := idOf("gone", 1), idOf("held", 1)
	if _, err := relay.Discard(ctx, pool, relay.Action{IDs: []uuid.UUID{gone}, Actor: "ops", Reason: "obsolete"}); err != nil {
		t.Fatal(err)
	}
	waitSQL(t, pool, 10*time.Second, 1, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'gone' AND aggregate_version = 2 AND published_at IS NOT NULL`)

	for _, ids := range [][]uuid.UUID{{gone}, {held, gone}} {
		replayed, err := relay.Replay(ctx, pool, relay.Action{IDs: ids, Actor: "ops", Reason: "try again"})
		if !errors.Is(err, relay.ErrDiscardedEvent) || replayed != nil {
			t.Fatalf("Replay(%v) = %v, %v; want ErrDiscardedEvent and nothing replayed", ids, replayed, err)
		}
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.dead_letters WHERE aggregate_id = 'held'`); n != 1 {
		t.Fatal("the dead event asked for beside a discarded one was replayed")
	}
	if n := queryInt(t, pool, `SELECT count(*) FROM outbox.replays WHERE action = 'replay'`); n != 0 {
		t.Fatalf("%d replay audit rows for refused replays", n)
	}
	// The dead one alone replays, and its aggregate follows in order.
	if ids, err := relay.Replay(ctx, pool, relay.Action{IDs: []uuid.UUID{held}, Actor: "ops", Reason: "fixed"}); err != nil || len(ids) != 1 {
		t.Fatalf("Replay(dead) = %v, %v", ids, err)
	}
}

// purgeArgs records the arguments of every purge statement a pool sends.
type purgeArgs struct {
	mu   sync.Mutex
	args [][]any
}

func (p *purgeArgs) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "-- purge:") {
		p.mu.Lock()
		p.args = append(p.args, d.Args)
		p.mu.Unlock()
	}
	return ctx
}
func (p *purgeArgs) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Retention judges age by the database's clock (a relay host's clock may be
// minutes off): events published 2 hours ago go, events published 30 minutes ago stay
// (Keep 1 hour), and no time from the relay's clock reaches the purge statement.
func TestRetentionCutoffIsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	connString := pgtest.ConnString(t, nil)
	pool := pgtest.PoolFor(t, connString)
	enqueue(t, pool, []string{"old", "young"}, 2)
	if _, err := pool.Exec(context.Background(), `UPDATE outbox.events SET
		published_at = now() - CASE aggregate_id WHEN 'old' THEN interval '2 hours' ELSE interval '30 minutes' END,
		created_at = now() - CASE aggregate_id WHEN 'old' THEN interval '3 hours' ELSE interval '31 minutes' END`); err != nil {
		t.Fatal(err)
	}
	traced := &purgeArgs{}
	cfg := fastConfig()
	cfg.Retention = relay.Retention{Keep: time.Hour}
	r := newRelay(t, tracedPool(t, connString, traced), &memsink.Sink{}, cfg)
	n, err := r.Purge(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want the 2 old events", n, err)
	}
	if left := queryInt(t, pool, `SELECT count(*) FROM outbox.events WHERE aggregate_id = 'young'`); left != 2 {
		t.Fatalf("%d of the young events left, want 2", left)
	}
	traced.mu.Lock()
	defer traced.mu.Unlock()
	if len(traced.args) == 0 {
		t.Fatal("no purge statement seen")
	}
	for _, args := range traced.args {
		for _, a := range args {
			if _, ok := a.(time.Time); ok {
				t.Fatalf("the purge statement was given a time from the relay's clock: %v", args)
			}
		}
	}
}
