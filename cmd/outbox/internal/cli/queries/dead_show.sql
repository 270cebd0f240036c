-- dead_show: every column of one event (dead or not: an operator may look before a
-- replay or after a discard), by @id.
SELECT id, seq, aggregate_type, aggregate_id, aggregate_version, partition, event_type, schema_version,
       coalesce(topic, '') AS topic, headers, content_type,
       coalesce(payload::text::bytea, payload_bytes) AS payload, coalesce(trace_parent, '') AS trace_parent,
       created_at, available_at, attempts, coalesce(last_error, '') AS last_error,
       published_at, dead_at, discarded_at
FROM {{schema}}.events
WHERE id = @id
