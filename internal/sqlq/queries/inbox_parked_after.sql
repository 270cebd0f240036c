-- inbox_parked_after: the aggregate's parked events above a version, in version order.
-- Its own statement, after inbox_version_lock: under READ COMMITTED it takes a new
-- snapshot, which sees every event parked by a transaction that held the version row
-- before this one (a RETURNING subquery of the lock statement would use that
-- statement's older snapshot and miss an event parked while it waited for the lock).
-- Served by the primary key.
SELECT event_id, seq, aggregate_version, event_type, schema_version, topic, coalesce(headers::text, ''),
       content_type, coalesce(payload, ''::bytea), trace_parent, created_at
FROM {{schema}}.inbox_parked
WHERE consumer = @consumer AND aggregate_type = @aggregate_type AND aggregate_id = @aggregate_id AND aggregate_version > @after_version
ORDER BY aggregate_version
