-- inbox_parked_after: the aggregate's parked events above a version, in version order.
-- Its own statement, after inbox_version_lock: under READ COMMITTED it takes a new
-- snapshot, which sees every event parked by a transaction that held the version row
-- before this one (a RETURNING subquery of the lock statement would use that
-- statement's older snapshot and miss an event parked while it waited for the lock).
-- Served by the primary key. $1 consumer, $2 aggregate type, $3 aggregate id, $4 version.
SELECT event_id, seq, aggregate_version, event_type, schema_version, topic, coalesce(headers::text, ''),
       content_type, coalesce(payload, ''::bytea), trace_parent, created_at
FROM {{schema}}.inbox_parked
WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND aggregate_version > $4
ORDER BY aggregate_version
