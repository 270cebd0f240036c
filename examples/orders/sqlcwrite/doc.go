// Package sqlcwrite is the write path of package orders on database/sql and
// sqlc-generated queries instead of pgx and outbox.Enqueue: the order row, the
// aggregate lock and the event row, in one *sql.Tx.
//
// The files a sqlc user copies:
//
//   - query.sql: InsertOrder, and the two statements every sqlc writer of events
//     needs, LockAggregate (outbox.lock_aggregate, the lock Enqueue takes) and
//     InsertEvent (the outbox.events insert);
//   - sqlc.yaml: the configuration; its schema is the orders table and
//     outbox_schema.sql, the outbox's migrations rendered for schema "outbox";
//   - db/: the code sqlc v1.31.1 generated from them, committed.
//
// A row written here is relayed exactly as one written by outbox.Enqueue (the tests
// compare the two). Enqueue validates an event before writing it; a writer of its own
// SQL must write valid events itself (here orders.Validate and orders.PlacedEvent make
// them), or the table's CHECK refuses the worst.
package sqlcwrite
