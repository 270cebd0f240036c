-- settle_delete: put back, whole, the rows a delete-on-publish claim
-- (claim_ordered_delete.sql, claim_unordered_delete.sql) deleted whose
-- messages were not published, in the same transaction: same seq (OVERRIDING SYSTEM
-- VALUE), same id, every column as it was, with the outcome applied as settle_keep.sql
-- does. Parameters, by name (relay/settle.go's deletedRows), one element per row, as
-- claimed: @seqs, @ids, @aggregate_types, @aggregate_ids, @aggregate_versions (0: NULL),
-- @event_types, @schema_versions, @topics ('': NULL), @headers (JSON text),
-- @content_types, @payloads (bytes), @trace_parents, @payload_is_json, @created_at,
-- @available_at, @attempts (before the claim), @last_errors; then settle_keep.sql's
-- @outcomes, @errors and @delays_ms.
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
FROM unnest(@seqs::bigint[], @ids::uuid[], @aggregate_types::text[], @aggregate_ids::text[],
            @aggregate_versions::bigint[], @event_types::text[], @schema_versions::int[], @topics::text[],
            @headers::text[], @content_types::text[], @payloads::bytea[], @trace_parents::text[],
            @payload_is_json::bool[], @created_at::timestamptz[], @available_at::timestamptz[], @attempts::int[],
            @last_errors::text[], @outcomes::text[], @errors::text[], @delays_ms::bigint[])
     AS u(seq, id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
          topic, headers, content_type, payload, trace_parent, payload_is_json, created_at,
          available_at, attempts, last_error, outcome, error, delay_ms)
