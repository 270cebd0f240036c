-- status_types: pending and dead events per event type, each half from its partial
-- index (events_pending, events_held).
SELECT event_type, sum(pending)::bigint AS pending, sum(dead)::bigint AS dead, min(oldest) AS oldest_pending
FROM (
    SELECT event_type, count(*) AS pending, 0 AS dead, min(created_at) AS oldest
    FROM {{schema}}.events WHERE published_at IS NULL AND dead_at IS NULL GROUP BY event_type
    UNION ALL
    SELECT event_type, 0, count(*), NULL
    FROM {{schema}}.events WHERE dead_at IS NOT NULL AND discarded_at IS NULL GROUP BY event_type
) AS t
GROUP BY event_type
ORDER BY event_type
