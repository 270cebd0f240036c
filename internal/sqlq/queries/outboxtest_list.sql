-- outboxtest_list: events matching a filter, in write order. Empty filter fields match all.
SELECT id, seq, aggregate_type, aggregate_id, coalesce(aggregate_version, 0), event_type,
       schema_version, coalesce(topic, ''), headers, content_type,
       coalesce(convert_to(payload::text, 'UTF8'), payload_bytes, ''::bytea)
FROM {{schema}}.events
WHERE ($1 = '' OR aggregate_type = $1)
  AND ($2 = '' OR aggregate_id = $2)
  AND ($3 = '' OR event_type = $3)
ORDER BY seq
