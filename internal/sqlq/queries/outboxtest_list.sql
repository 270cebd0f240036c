-- outboxtest_list: events matching a filter, in write order. Empty filter fields match all.
-- Each column is named as the field of outboxtest.Enqueued it fills (pgx.RowToStructByName).
SELECT id, seq, aggregate_type, aggregate_id, coalesce(aggregate_version, 0) AS aggregate_version, event_type,
       schema_version, coalesce(topic, '') AS topic, headers, content_type,
       coalesce(convert_to(payload::text, 'UTF8'), payload_bytes, ''::bytea) AS payload
FROM {{schema}}.events
WHERE (@aggregate_type = '' OR aggregate_type = @aggregate_type)
  AND (@aggregate_id = '' OR aggregate_id = @aggregate_id)
  AND (@event_type = '' OR event_type = @event_type)
ORDER BY seq
