package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/sqlq"
)

// Action is an operator's request to replay or discard events.
type Action struct {
	// Schema holding the outbox tables. Default "outbox".
	Schema string
	// IDs of the events. Required.
	IDs []uuid.UUID
	// Actor says who acts (a user name, a ticket). Required; recorded in replays.
	Actor string
	// Reason says why. Required; recorded in replays.
	Reason string
}

// actionParams are replay.sql's and discard.sql's.
type actionParams struct {
	IDs    []uuid.UUID `sql:"ids"`
	Actor  string      `sql:"actor"`
	Reason string      `sql:"reason"`
}

func (a Action) params() *actionParams {
	return &actionParams{IDs: a.IDs, Actor: a.Actor, Reason: a.Reason}
}

func (a Action) validate() (string, error) {
	schema := a.Schema
	if schema == "" {
		schema = sqlq.DefaultSchema
	}
	quoted, err := sqlq.QuoteSchema(schema)
	if err != nil {
		return "", fmt.Errorf("Schema: %w", err)
	}
	switch {
	case len(a.IDs) == 0:
		return "", errors.New("IDs must name at least one event")
	case a.Actor == "":
		return "", errors.New("Actor must not be empty: replays and discards are audited")
	case a.Reason == "":
		return "", errors.New("Reason must not be empty: replays and discards are audited")
	}
	return quoted, nil
}

// ErrDiscardedEvent is matched by the error Replay returns when asked to replay a
// discarded event. A discarded event no longer holds its aggregate, so the aggregate's
// later events may have been published since: publishing it now would break the
// aggregate's order. Enqueue a new event instead.
var ErrDiscardedEvent = errors.New("discarded events cannot be replayed")

// Replay makes dead events pending again with a fresh attempt budget, records who and
// why in the replays table, and returns the ids it replayed; events that are not dead
// are left alone. In ordered mode a replayed event becomes its aggregate's head again,
// and the events it held follow it in order. When a.IDs name a discarded event, nothing
// is replayed and the error matches [ErrDiscardedEvent].
func Replay(ctx context.Context, pool *pgxpool.Pool, a Action) ([]uuid.UUID, error) {
	quoted, err := a.validate()
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	stmt := sqlq.Bind[actionParams]("replay", quoted)
	rows, err := pool.Query(ctx, stmt.SQL, stmt.Args(a.params())...)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	var replayed, refused []uuid.UUID
	var (
		id        uuid.UUID
		discarded bool
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &discarded}, func() error {
		if discarded {
			refused = append(refused, id)
		} else {
			replayed = append(replayed, id)
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("replay: %w", err)
	case len(refused) > 0:
		return nil, fmt.Errorf("replay: %w: %v (nothing was replayed)", ErrDiscardedEvent, refused)
	}
	return replayed, nil
}

// Discard gives up on events that are not published (dead or still pending), records
// who and why, and returns the ids it discarded. A discarded event is never published
// and no longer holds its aggregate. An event a relay is publishing right now is
// waited for: if that publish succeeds, the event is not discarded.
func Discard(ctx context.Context, pool *pgxpool.Pool, a Action) ([]uuid.UUID, error) {
	quoted, err := a.validate()
	if err != nil {
		return nil, fmt.Errorf("discard: %w", err)
	}
	stmt := sqlq.Bind[actionParams]("discard", quoted)
	rows, err := pool.Query(ctx, stmt.SQL, stmt.Args(a.params())...)
	if err != nil {
		return nil, fmt.Errorf("discard: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("discard: %w", err)
	}
	return ids, nil
}
