-- inbox_quarantine: stores an event the consumer would not or could not apply, with the
-- reason, settles its dedup row as quarantined, and takes it out of the park if it was
-- parked (an unparked event whose handler failed for good). $1 consumer, $2 event id,
-- $3 aggregate type, $4 aggregate id, $5 aggregate version, $6 seq, $7 event type,
-- $8 schema version, $9 topic, $10 headers (JSON text or NULL), $11 content type,
-- $12 payload, $13 trace parent, $14 created at, $15 kind, $16 reason, $17 attempts.
WITH quarantined AS (
    INSERT INTO {{schema}}.inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, aggregate_version, seq,
        event_type, schema_version, topic, headers, content_type, payload, trace_parent, created_at, kind, reason, attempts)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text::jsonb, $11, $12, $13, $14, $15, $16, $17)
    ON CONFLICT (consumer, event_id) DO UPDATE
    SET kind = excluded.kind, reason = excluded.reason, attempts = excluded.attempts, quarantined_at = now()
), unparked AS (
    DELETE FROM {{schema}}.inbox_parked
    WHERE consumer = $1 AND aggregate_type = $3 AND aggregate_id = $4 AND aggregate_version = $5 AND event_id = $2
)
UPDATE {{schema}}.inbox SET outcome = 'quarantined', processed_at = now()
WHERE consumer = $1 AND event_id = $2
