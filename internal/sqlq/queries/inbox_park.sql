-- inbox_park: stores an event that arrived past a gap (the Park policy) and settles its
-- dedup row as parked, only when no other event holds the same version parked (the
-- UPDATE sees the INSERT's result through the CTE: it changes one row or none).
-- @headers is JSON text or NULL.
WITH parked AS (
    INSERT INTO {{schema}}.inbox_parked (consumer, event_id, aggregate_type, aggregate_id, aggregate_version, seq,
        event_type, schema_version, topic, headers, content_type, payload, trace_parent, created_at)
    VALUES (@consumer, @event_id, @aggregate_type, @aggregate_id, @aggregate_version, @seq,
        @event_type, @schema_version, @topic, @headers::text::jsonb, @content_type, @payload, @trace_parent, @created_at)
    ON CONFLICT (consumer, aggregate_type, aggregate_id, aggregate_version) DO NOTHING
    RETURNING event_id
)
UPDATE {{schema}}.inbox SET outcome = 'parked', processed_at = now()
WHERE consumer = @consumer AND event_id IN (SELECT event_id FROM parked)
