-- inbox_park: stores an event that arrived past a gap (the Park policy) and settles its
-- dedup row as parked, only when no other event holds the same version parked (the
-- UPDATE sees the INSERT's result through the CTE: it changes one row or none).
-- $1 consumer, $2 event id, $3 aggregate type, $4 aggregate id, $5 aggregate version,
-- $6 seq, $7 event type, $8 schema version, $9 topic, $10 headers (JSON text or NULL),
-- $11 content type, $12 payload, $13 trace parent, $14 created at.
WITH parked AS (
    INSERT INTO {{schema}}.inbox_parked (consumer, event_id, aggregate_type, aggregate_id, aggregate_version, seq,
        event_type, schema_version, topic, headers, content_type, payload, trace_parent, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text::jsonb, $11, $12, $13, $14)
    ON CONFLICT (consumer, aggregate_type, aggregate_id, aggregate_version) DO NOTHING
    RETURNING event_id
)
UPDATE {{schema}}.inbox SET outcome = 'parked', processed_at = now()
WHERE consumer = $1 AND event_id IN (SELECT event_id FROM parked)
