// Package outboxtest helps users test their own code that enqueues events: assert that
// a transaction (committed, or still open) wrote the events it should.
//
//	outboxtest.AssertEnqueued(t, tx, outboxtest.Match{AggregateType: "order", EventType: "order.created"})
package outboxtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/sqlq"
)

// Querier runs queries: a pgx pool, connection or open transaction. Pass the open
// transaction to see events it has not committed yet.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Match selects events; empty fields match everything.
type Match struct {
	// Schema holding the outbox tables. Default "outbox".
	Schema        string
	AggregateType string
	AggregateID   string
	EventType     string
}

func (m Match) String() string {
	return fmt.Sprintf("aggregate_type=%q aggregate_id=%q event_type=%q", m.AggregateType, m.AggregateID, m.EventType)
}

// Enqueued is an event as stored.
type Enqueued struct {
	ID               uuid.UUID
	Seq              int64
	AggregateType    string
	AggregateID      string
	AggregateVersion int64
	EventType        string
	SchemaVersion    int
	Topic            string
	Headers          map[string]string
	ContentType      string
	// Payload is the stored body; JSON payloads come back as PostgreSQL normalised them.
	Payload []byte
}

// listParams are outboxtest_list.sql's: Match without its schema.
type listParams struct {
	AggregateType string `sql:"aggregate_type"`
	AggregateID   string `sql:"aggregate_id"`
	EventType     string `sql:"event_type"`
}

// List returns the events matching m, in write order. It fails t on a query error.
func List(t testing.TB, q Querier, m Match) []Enqueued {
	t.Helper()
	schema := m.Schema
	if schema == "" {
		schema = sqlq.DefaultSchema
	}
	quoted, err := sqlq.QuoteSchema(schema)
	if err != nil {
		t.Fatalf("outboxtest: Match.Schema: %v", err)
		return nil
	}
	stmt := sqlq.Bind[listParams]("outboxtest_list", quoted)
	p := listParams{AggregateType: m.AggregateType, AggregateID: m.AggregateID, EventType: m.EventType}
	rows, err := q.Query(context.Background(), stmt.SQL, stmt.Args(&p)...)
	if err != nil {
		t.Fatalf("outboxtest: list events: %v", err)
		return nil
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByName[Enqueued])
	if err != nil {
		t.Fatalf("outboxtest: read events: %v", err)
	}
	return events
}

// AssertEnqueued fails t unless exactly one event matches m, and returns it.
func AssertEnqueued(t testing.TB, q Querier, m Match) Enqueued {
	t.Helper()
	events := List(t, q, m)
	if len(events) != 1 {
		t.Fatalf("outboxtest: %d events match %s, want exactly 1", len(events), m)
		return Enqueued{}
	}
	return events[0]
}

// AssertNotEnqueued fails t if any event matches m.
func AssertNotEnqueued(t testing.TB, q Querier, m Match) {
	t.Helper()
	if events := List(t, q, m); len(events) != 0 {
		t.Fatalf("outboxtest: %d events match %s, want none", len(events), m)
	}
}
