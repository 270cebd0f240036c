-- enqueue_arrays: enqueue for pgx transactions. The same statement as enqueue.sql (read
-- its comments: the sorted advisory locks before any insert, ON CONFLICT DO NOTHING),
-- but the events arrive as typed arrays in pgx's binary format instead of one JSON
-- document: the server skips parsing the document, and each payload is parsed once.
--
-- Parameters (bound by name to arraysParams in enqueue_params.go): one array per column,
-- named after it, one element per event, NULL for absent values (@headers and @payload
-- as JSON text); @lock: take the per-aggregate locks.
WITH locked AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(1869968760, k)) AS n
    FROM (
        SELECT DISTINCT hashtext(t || chr(31) || i) AS k
        FROM unnest(@aggregate_type::text[], @aggregate_id::text[]) AS a(t, i)
        WHERE @lock::boolean
        ORDER BY k
    ) keys
)
INSERT INTO {{schema}}.events (
    id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    topic, headers, content_type, payload, payload_bytes, trace_parent, available_at)
SELECT u.id, u.aggregate_type, u.aggregate_id, u.aggregate_version, u.event_type, u.schema_version,
       u.topic, coalesce(u.headers::jsonb, '{}'), u.content_type, u.payload::json, u.payload_bytes,
       u.trace_parent, coalesce(u.available_at, now())
FROM unnest(@id::uuid[], @aggregate_type::text[], @aggregate_id::text[], @aggregate_version::bigint[],
            @event_type::text[], @schema_version::int[], @topic::text[], @headers::text[],
            @content_type::text[], @payload::text[], @payload_bytes::bytea[], @trace_parent::text[],
            @available_at::timestamptz[])
     WITH ORDINALITY AS u(id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
                          topic, headers, content_type, payload, payload_bytes, trace_parent, available_at, ord)
CROSS JOIN locked
ORDER BY u.ord
ON CONFLICT DO NOTHING RETURNING id::text
