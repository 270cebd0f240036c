-- enqueue: insert a batch of events in one statement, one round trip.
--
-- @rows is a JSON array of rows (one parameter, so it works the same through pgx and any
-- database/sql driver). @lock says whether to take the per-aggregate advisory locks.
-- Both are bound by name to jsonParams in enqueue_params.go.
--
-- The locks: a transaction-scoped advisory lock per distinct aggregate, taken in sorted
-- order (no deadlocks between two batches) before any row is inserted, so that two
-- transactions writing one aggregate get seq in commit order. The two-int form keeps us
-- in a key space apart from callers' bigint advisory locks; class 1869968760 is 'outx'.
-- count() consumes every lock before the single "locked" row exists, and the INSERT's
-- rows are joined to it, so no row is written before all locks are held.
--
-- ON CONFLICT DO NOTHING (no target: both the id and the aggregate-version unique
-- indexes are arbiters) keeps the caller's transaction usable when an id or version
-- already exists; the caller compares RETURNING with what it sent. The Writer drops the
-- last line (conflict handling and RETURNING) when no event in the call can conflict (no
-- caller-supplied id, no aggregate version): a speculative insertion costs every row a
-- pre-check of each unique index and an extra WAL record, and a generated UUIDv7 does not
-- collide. Each enqueue statement ends with that line, alone.
WITH input AS MATERIALIZED (
    SELECT *
    FROM json_to_recordset(@rows::json) AS r(
        ord int, id uuid, aggregate_type text, aggregate_id text, aggregate_version bigint,
        event_type text, schema_version int, topic text, headers jsonb, content_type text,
        payload json, payload_b64 text, trace_parent text, available_at timestamptz)
), locked AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(1869968760, k)) AS n
    FROM (
        SELECT DISTINCT hashtext(aggregate_type || chr(31) || aggregate_id) AS k
        FROM input
        WHERE @lock::boolean
        ORDER BY k
    ) keys
)
INSERT INTO {{schema}}.events (
    id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    topic, headers, content_type, payload, payload_bytes, trace_parent, available_at)
SELECT i.id, i.aggregate_type, i.aggregate_id, i.aggregate_version, i.event_type, i.schema_version,
       i.topic, coalesce(i.headers, '{}'), i.content_type, i.payload, decode(i.payload_b64, 'base64'),
       i.trace_parent, coalesce(i.available_at, now())
FROM input i CROSS JOIN locked
ORDER BY i.ord
ON CONFLICT DO NOTHING RETURNING id::text
