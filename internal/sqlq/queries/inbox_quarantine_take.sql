-- inbox_quarantine_take: takes one quarantined event out of the quarantine to replay it,
-- in the replaying transaction (the row lock makes a concurrent replay of the same event
-- wait, then find nothing).
DELETE FROM {{schema}}.inbox_quarantine
WHERE consumer = @consumer AND event_id = @event_id
RETURNING event_id, seq, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, topic,
    coalesce(headers::text, ''), content_type, coalesce(payload, ''::bytea), trace_parent, created_at, attempts
