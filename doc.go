// Package outbox is a transactional outbox for Go services on PostgreSQL.
//
// A service writes its business rows and its events in one transaction with
// [Enqueue]; a relay (package relay) publishes committed events to a broker at least
// once, in order per aggregate. An event exists if and only if its transaction
// committed: Enqueue takes the caller's transaction ([PgxTx] or [SQLTx]) and never a
// pool, and it validates every input in Go before any SQL runs, so bad input is
// refused with an error naming the field and never aborts the caller's transaction.
//
// The schema comes from package outboxmigrate; docs/architecture.md describes the
// whole design.
package outbox
