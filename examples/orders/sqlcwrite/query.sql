-- name: InsertOrder :one
-- One new order; returns the time the database gave it.
INSERT INTO orders (id, customer, sku, quantity)
VALUES ($1, $2, $3, $4)
RETURNING created_at;

-- name: LockAggregate :exec
-- The aggregate lock outbox.Enqueue takes: call it in the transaction before
-- InsertEvent, so writers of one aggregate commit in write order and the relay
-- publishes in it.
SELECT outbox.lock_aggregate(sqlc.arg(aggregate_type)::text, sqlc.arg(aggregate_id)::text);

-- name: InsertEvent :exec
-- One event into the outbox. The columns left out take the defaults outbox.Enqueue
-- gives an event that leaves them unset: headers '{}', no topic, no trace parent,
-- available now. payload is JSON text; it is stored as written.
INSERT INTO outbox.events (
    id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    content_type, payload)
VALUES (
    sqlc.arg(id), sqlc.arg(aggregate_type), sqlc.arg(aggregate_id), sqlc.narg(aggregate_version),
    sqlc.arg(event_type), sqlc.arg(schema_version), sqlc.arg(content_type), sqlc.arg(payload)::json);
