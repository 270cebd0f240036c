-- settle_delete: put back, whole, the rows a delete-on-publish claim
-- (claim_ordered_delete.sql, claim_unordered_delete.sql) deleted whose
-- messages were not published, in the same transaction: same seq (OVERRIDING SYSTEM
-- VALUE), same id, every column as it was, with the outcome applied as settle_keep.sql
-- does. $1 seq, $2 id, $3 aggregate_type, $4 aggregate_id, $5 aggregate_version (0:
-- NULL), $6 event_type, $7 schema_version, $8 topic ('': NULL), $9 headers (JSON text),
-- $10 content_type, $11 payload as bytes, $12 trace_parent, $13 whether the payload is
-- JSON, $14 created_at, $15 available_at, $16 attempts before the claim, $17 last_error,
-- all as claimed; $18 outcome, $19 error, $20 delay in ms.
INSERT INTO {{schema}}.events (
    seq, id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
    topic, headers, content_type, payload, payload_bytes, trace_parent, created_at,
    available_at, attempts, last_error, dead_at)
OVERRIDING SYSTEM VALUE
SELECT u.seq, u.id, u.aggregate_type, u.aggregate_id, nullif(u.aggregate_version, 0), u.event_type, u.schema_version,
       nullif(u.topic, ''), u.headers::jsonb, u.content_type,
       CASE WHEN u.payload_is_json THEN convert_from(u.payload, 'UTF8')::json END,
       CASE WHEN NOT u.payload_is_json THEN u.payload END,
       u.trace_parent, u.created_at,
       CASE WHEN u.outcome IN ('retry', 'deferred') THEN clock_timestamp() + u.delay_ms * interval '1 millisecond'
                        WHEN u.outcome = 'held' THEN now() + u.delay_ms * interval '1 millisecond' ELSE u.available_at END,
       CASE WHEN u.outcome IN ('untouched', 'deferred', 'held') THEN u.attempts ELSE u.attempts + 1 END,
       coalesce(u.error, u.last_error),
       CASE WHEN u.outcome = 'dead' THEN now() END
FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::int[],
            $8::text[], $9::text[], $10::text[], $11::bytea[], $12::text[], $13::bool[], $14::timestamptz[],
            $15::timestamptz[], $16::int[], $17::text[], $18::text[], $19::text[], $20::bigint[])
     AS u(seq, id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
          topic, headers, content_type, payload, trace_parent, payload_is_json, created_at,
          available_at, attempts, last_error, outcome, error, delay_ms)
