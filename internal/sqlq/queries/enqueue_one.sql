-- enqueue_one: enqueue a single event, the common case, with one scalar parameter per
-- column: cheaper for the server and the client than the batch statements (no JSON
-- document or arrays to unpack, no sort), and the same for pgx and database/sql.
-- Read enqueue.sql for the aggregate lock and the conflict handling.
--
-- $1 id, $2 aggregate_type, $3 aggregate_id, $4 aggregate_version, $5 event_type,
-- $6 schema_version, $7 topic, $8 headers (JSON text), $9 content_type, $10 payload
-- (JSON text), $11 payload_bytes, $12 trace_parent, $13 available_at; NULL for absent
-- values. $14: take the aggregate lock (in the FROM clause, so before the row is
-- inserted).
INSERT INTO {{schema}}.events (
    id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    topic, headers, content_type, payload, payload_bytes, trace_parent, available_at)
SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::int,
       $7::text, coalesce($8::jsonb, '{}'), $9::text, $10::json, $11::bytea,
       $12::text, coalesce($13::timestamptz, now())
FROM (SELECT CASE WHEN $14::boolean THEN pg_advisory_xact_lock(1869968760, hashtext($2 || chr(31) || $3)) END) AS locked
ON CONFLICT DO NOTHING RETURNING id::text
