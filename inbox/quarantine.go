package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox"
)

// QuarantinedEvent is one event in a consumer's quarantine.
type QuarantinedEvent struct {
	// Message is the event as it was delivered.
	Message outbox.Message
	// Kind and Reason say why it was quarantined.
	Kind   QuarantineKind
	Reason string
	// Attempts counts the times the event was quarantined: 1, plus one per failed
	// replay.
	Attempts int
	// QuarantinedAt is when it was quarantined last.
	QuarantinedAt time.Time
}

// ListOptions pages through [Consumer.Quarantined].
type ListOptions struct {
	// Limit is the page size, 1 to 10000. Default 100.
	Limit int
	// After is the last event of the previous page; nil for the first page.
	After *QuarantinedEvent
}

// Querier runs queries: *pgxpool.Pool, *pgx.Conn and pgx.Tx all do.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// quarantineListParams are inbox_quarantine_list.sql's: a page after the cursor
// (AfterTime, AfterID), the previous page's last event.
type quarantineListParams struct {
	Consumer  string    `sql:"consumer"`
	AfterTime time.Time `sql:"after_time"`
	AfterID   uuid.UUID `sql:"after_id"`
	PageSize  int       `sql:"page_size"`
}

// Quarantined lists the consumer's quarantined events, oldest first, one page at a time.
func (c *Consumer) Quarantined(ctx context.Context, db Querier, opts *ListOptions) ([]QuarantinedEvent, error) {
	if db == nil {
		return nil, errors.New("inbox: db is nil")
	}
	if opts == nil {
		opts = &ListOptions{}
	}
	limit := opts.Limit
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > 10000 {
		return nil, fmt.Errorf("inbox: ListOptions.Limit is %d; it must be between 1 and 10000", limit)
	}
	afterTime, afterID := time.Time{}, uuid.Nil
	if opts.After != nil {
		afterTime, afterID = opts.After.QuarantinedAt, opts.After.Message.ID
	}
	p := quarantineListParams{Consumer: c.name, AfterTime: afterTime, AfterID: afterID, PageSize: limit}
	rows, err := db.Query(ctx, c.q.quarantineList.SQL, c.q.quarantineList.Args(&p)...)
	if err != nil {
		return nil, fmt.Errorf("inbox: list the quarantine of %s: %w", c.name, err)
	}
	defer rows.Close()
	var out []QuarantinedEvent
	for rows.Next() {
		var e QuarantinedEvent
		var headers, kind string
		m := &e.Message
		if err := rows.Scan(&m.ID, &m.Seq, &m.AggregateType, &m.AggregateID, &m.AggregateVersion, &m.EventType, &m.SchemaVersion,
			&m.Topic, &headers, &m.ContentType, &m.Payload, &m.TraceParent, &m.CreatedAt, &kind, &e.Reason, &e.Attempts, &e.QuarantinedAt); err != nil {
			return nil, fmt.Errorf("inbox: list the quarantine of %s: %w", c.name, err)
		}
		if m.Headers, err = parseHeaders(headers); err != nil {
			return nil, fmt.Errorf("inbox: list the quarantine of %s: %w", c.name, err)
		}
		e.Kind = QuarantineKind(kind)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inbox: list the quarantine of %s: %w", c.name, err)
	}
	return out, nil
}

// Replay takes a quarantined event out of the quarantine and processes it again with h,
// in one transaction begun on db: as a delivery would, except that its dedup record
// exists already. It is applied (and unparks what waited for it), stale, parked — or
// quarantined again, with the new reason and one more attempt. Replay returns
// [ErrNotQuarantined] for an event not in the quarantine.
func (c *Consumer) Replay(ctx context.Context, db outbox.TxBeginner, eventID uuid.UUID, h Handler) (Result, error) {
	start := time.Now()
	if err := checkArgs(db == nil, h == nil); err != nil {
		return Result{}, err
	}
	var res Result
	var st tally
	var msg outbox.Message
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		st = tally{}
		var err error
		var attempts int
		msg, attempts, err = c.take(ctx, pgxConn{tx}, eventID)
		if err != nil {
			return err
		}
		run := func(ctx context.Context, m outbox.Message) error { return h(ctx, tx, m) }
		res, err = c.process(ctx, pgxConn{tx}, msg, run, &st, &attempts)
		return err
	})
	if errors.Is(err, ErrNotQuarantined) {
		return Result{}, fmt.Errorf("inbox: replay event %s for %s: %w", eventID, c.name, err)
	}
	msg.ID = eventID
	return c.finish(ctx, start, msg, res, &st, err)
}

// eventKey is a consumer's event: inbox_quarantine_take.sql's parameters.
type eventKey struct {
	Consumer string    `sql:"consumer"`
	EventID  uuid.UUID `sql:"event_id"`
}

// take deletes an event's quarantine row and returns the event and its attempts.
func (c *Consumer) take(ctx context.Context, db conn, eventID uuid.UUID) (outbox.Message, int, error) {
	var m outbox.Message
	var headers string
	var attempts int
	key := eventKey{Consumer: c.name, EventID: eventID}
	err := db.queryRow(ctx, c.q.quarantineTake.SQL, c.q.quarantineTake.Args(&key)...).Scan(&m.ID, &m.Seq, &m.AggregateType, &m.AggregateID,
		&m.AggregateVersion, &m.EventType, &m.SchemaVersion, &m.Topic, &headers, &m.ContentType, &m.Payload, &m.TraceParent,
		&m.CreatedAt, &attempts)
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, errSQLNoRows) {
		return m, 0, ErrNotQuarantined
	}
	if err != nil {
		return m, 0, fmt.Errorf("take the event out of the quarantine: %w", err)
	}
	if m.Headers, err = parseHeaders(headers); err != nil {
		return m, 0, err
	}
	m.Attempt = attempts + 1
	return m, attempts, nil
}
