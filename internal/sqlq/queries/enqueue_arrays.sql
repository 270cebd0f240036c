-- enqueue_arrays: enqueue for pgx transactions. The same statement as enqueue.sql (read
-- its comments: the sorted advisory locks before any insert, ON CONFLICT DO NOTHING),
-- but the events arrive as typed arrays in pgx's binary format instead of one JSON
-- document: the server skips parsing the document, and each payload is parsed once.
--
-- $1 id, $2 aggregate_type, $3 aggregate_id, $4 aggregate_version, $5 event_type,
-- $6 schema_version, $7 topic, $8 headers (JSON text), $9 content_type, $10 payload (JSON
-- text), $11 payload_bytes, $12 trace_parent, $13 available_at: one element per event,
-- NULL for absent values. $14: take the per-aggregate locks.
WITH locked AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(1869968760, k)) AS n
    FROM (
        SELECT DISTINCT hashtext(t || chr(31) || i) AS k
        FROM unnest($2::text[], $3::text[]) AS a(t, i)
        WHERE $14::boolean
        ORDER BY k
    ) keys
)
INSERT INTO {{schema}}.events (
    id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    topic, headers, content_type, payload, payload_bytes, trace_parent, available_at)
SELECT u.id, u.aggregate_type, u.aggregate_id, u.aggregate_version, u.event_type, u.schema_version,
       u.topic, coalesce(u.headers::jsonb, '{}'), u.content_type, u.payload::json, u.payload_bytes,
       u.trace_parent, coalesce(u.available_at, now())
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::int[], $7::text[],
            $8::text[], $9::text[], $10::text[], $11::bytea[], $12::text[], $13::timestamptz[])
     WITH ORDINALITY AS u(id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
                          topic, headers, content_type, payload, payload_bytes, trace_parent, available_at, ord)
CROSS JOIN locked
ORDER BY u.ord
ON CONFLICT DO NOTHING RETURNING id::text
