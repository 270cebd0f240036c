-- inbox_quarantine: stores an event the consumer would not or could not apply, with the
-- reason, settles its dedup row as quarantined, and takes it out of the park if it was
-- parked (an unparked event whose handler failed for good). @headers is JSON text or
-- NULL.
WITH quarantined AS (
    INSERT INTO {{schema}}.inbox_quarantine (consumer, event_id, aggregate_type, aggregate_id, aggregate_version, seq,
        event_type, schema_version, topic, headers, content_type, payload, trace_parent, created_at, kind, reason, attempts)
    VALUES (@consumer, @event_id, @aggregate_type, @aggregate_id, @aggregate_version, @seq,
        @event_type, @schema_version, @topic, @headers::text::jsonb, @content_type, @payload, @trace_parent, @created_at,
        @kind, @reason, @attempts)
    ON CONFLICT (consumer, event_id) DO UPDATE
    SET kind = excluded.kind, reason = excluded.reason, attempts = excluded.attempts, quarantined_at = now()
), unparked AS (
    DELETE FROM {{schema}}.inbox_parked
    WHERE consumer = @consumer AND aggregate_type = @aggregate_type AND aggregate_id = @aggregate_id
        AND aggregate_version = @aggregate_version AND event_id = @event_id
)
UPDATE {{schema}}.inbox SET outcome = 'quarantined', processed_at = now()
WHERE consumer = @consumer AND event_id = @event_id
