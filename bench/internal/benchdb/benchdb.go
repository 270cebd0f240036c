// Package benchdb prepares the database the benchmarks run against: a fresh database
// migrated with outboxmigrate, an accounts table for the business transaction and a
// minimal events table to compare outbox.Enqueue with; for the relay benchmarks, a
// freshly migrated outbox schema and a backlog of events written with COPY.
package benchdb

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/outboxmigrate"
)

// DefaultDSN is the server the benchmarks use unless told otherwise.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Accounts is the number of rows in the accounts table.
const Accounts = 10_000

// Payload is the body of every benchmark event: about 200 bytes of JSON.
var Payload = []byte(`{"amount":{"value":"1.00","currency":"EUR"},"reason":"deposit",` +
	`"reference":"wb-0192f3a4-7c1d-7e55-9a0b-3c4d5e6f7a8b","channel":"api",` +
	`"occurred_at":"2025-01-01T12:00:00Z","note":"one unit credited by writerbench"}`)

const schemaSQL = `
CREATE TABLE accounts (
    id      integer PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0
);
CREATE TABLE minimal_events (
    id         bigserial PRIMARY KEY,
    aggregate  text NOT NULL,
    event_type text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);`

// UpdateSQL is the business statement: credit one account.
const UpdateSQL = `UPDATE accounts SET balance = balance + 1 WHERE id = $1`

// OrdersSQL creates the orders table of the realistic business transaction (one
// INSERT of a new order), if it does not exist.
const OrdersSQL = `
CREATE TABLE IF NOT EXISTS orders (
    id          uuid PRIMARY KEY,
    customer_id integer NOT NULL,
    total_cents bigint NOT NULL,
    status      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS orders_customer ON orders (customer_id);`

// InsertOrderSQL is that business statement: place one order (id, customer, total).
const InsertOrderSQL = `INSERT INTO orders (id, customer_id, total_cents, status) VALUES ($1, $2, $3, 'placed')`

// MinimalInsertSQL writes one row into the minimal events table.
const MinimalInsertSQL = `INSERT INTO minimal_events (aggregate, event_type, payload) VALUES ($1, $2, $3)`

// RawEventsInsertSQL writes one row into outbox.events by hand: the real table, its
// indexes and constraints, without Enqueue (no validation, no aggregate lock, no
// generated id). It is the floor Enqueue stands on.
const RawEventsInsertSQL = `INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4, $5)`

// Setup drops and recreates the database name on the server at dsn, migrates it with
// outboxmigrate (schema "outbox"), creates and fills the accounts table and creates the
// minimal events table. It returns a pool of at most maxConns connections to it.
func Setup(ctx context.Context, dsn, name string, maxConns int32) (*pgxpool.Pool, error) {
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", dsn, err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	for _, q := range []string{
		"DROP DATABASE IF EXISTS " + ident + " WITH (FORCE)",
		"CREATE DATABASE " + ident,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			_ = admin.Close(ctx)
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	if err := admin.Close(ctx); err != nil {
		return nil, fmt.Errorf("close admin connection: %w", err)
	}

	pool, err := Open(ctx, dsn, name, maxConns, nil)
	if err != nil {
		return nil, err
	}
	if err := prepare(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("prepare database %s: %w", name, err)
	}
	return pool, nil
}

// Open returns a pool of at most maxConns connections to database name on the server
// at dsn, with the server settings in params (e.g. "jit": "off") on every connection.
func Open(ctx context.Context, dsn, name string, maxConns int32, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.ConnConfig.Database = name
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool on database %s: %w", name, err)
	}
	return pool, nil
}

// JSONBSchema is a second outbox schema whose payload column is jsonb (the type the
// payload had before migration 0005, and what a deployment may alter it back to).
const JSONBSchema = "outbox_jsonb"

func prepare(ctx context.Context, pool *pgxpool.Pool) error {
	for _, schema := range []string{"outbox", JSONBSchema} {
		m, err := outboxmigrate.New(&outboxmigrate.Config{Schema: schema})
		if err != nil {
			return fmt.Errorf("new migrator: %w", err)
		}
		if _, err := m.Migrate(ctx, pool); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE "+JSONBSchema+".events ALTER COLUMN payload TYPE jsonb USING payload::jsonb"); err != nil {
		return fmt.Errorf("make %s's payload jsonb: %w", JSONBSchema, err)
	}
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("create benchmark tables: %w", err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO accounts (id) SELECT generate_series(1, $1::int)", Accounts); err != nil {
		return fmt.Errorf("fill accounts: %w", err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE accounts"); err != nil {
		return fmt.Errorf("vacuum accounts: %w", err)
	}
	return nil
}

// Reset empties both event tables, vacuums the accounts table and takes a checkpoint,
// so that every measurement starts from the same state whatever ran before it.
func Reset(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []string{
		"TRUNCATE outbox.events, " + JSONBSchema + ".events, minimal_events RESTART IDENTITY",
		"VACUUM ANALYZE accounts",
		"CHECKPOINT",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset: %s: %w", q, err)
		}
	}
	return nil
}

// Event returns the benchmark event for an account: aggregate "account"/id with
// [Payload] as its body.
func Event(accountID int) outbox.Event {
	return outbox.Event{
		AggregateType: "account",
		AggregateID:   strconv.Itoa(accountID),
		EventType:     "account.credited",
		Payload:       Payload,
	}
}

// Batch returns n events for n consecutive accounts from first (1-based, wrapping
// after [Accounts]), so the events of one batch name n distinct aggregates when
// n ≤ Accounts.
func Batch(first, n int) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = Event((first-1+i)%Accounts + 1)
	}
	return events
}
