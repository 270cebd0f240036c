-- enqueue_one: enqueue a single event, the common case, with one scalar parameter per
-- column: cheaper for the server and the client than the batch statements (no JSON
-- document or arrays to unpack, no sort), and the same for pgx and database/sql.
-- Read enqueue.sql for the aggregate lock and the conflict handling.
--
-- Parameters (bound by name to oneParams in enqueue_params.go): one per column, named
-- after it, NULL for absent values (@headers and @payload as JSON text); @lock: take the
-- aggregate lock (in the FROM clause, so before the row is inserted).
INSERT INTO {{schema}}.events (
    id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    topic, headers, content_type, payload, payload_bytes, trace_parent, available_at)
SELECT @id::uuid, @aggregate_type::text, @aggregate_id::text, @aggregate_version::bigint, @event_type::text, @schema_version::int,
       @topic::text, coalesce(@headers::jsonb, '{}'), @content_type::text, @payload::json, @payload_bytes::bytea,
       @trace_parent::text, coalesce(@available_at::timestamptz, now())
FROM (SELECT CASE WHEN @lock::boolean THEN pg_advisory_xact_lock(1869968760, hashtext(@aggregate_type || chr(31) || @aggregate_id)) END) AS locked
ON CONFLICT DO NOTHING RETURNING id::text
