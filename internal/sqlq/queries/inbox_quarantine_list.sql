-- inbox_quarantine_list: one page of a consumer's quarantined events, oldest first, after
-- a cursor (quarantined_at, event_id) of the previous page. Served by the primary key's
-- consumer prefix; a quarantine is small.
SELECT event_id, seq, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, topic,
    coalesce(headers::text, ''), content_type, coalesce(payload, ''::bytea), trace_parent, created_at,
    kind, reason, attempts, quarantined_at
FROM {{schema}}.inbox_quarantine
WHERE consumer = @consumer AND (quarantined_at, event_id) > (@after_time, @after_id)
ORDER BY quarantined_at, event_id
LIMIT @page_size
