-- admin_by_type: pending and dead counts per event type, and each type's oldest pending
-- age. Two arms, each the predicate of one partial index (events_pending, events_held), so
-- neither reads published rows.
SELECT event_type, sum(pending)::bigint, sum(dead)::bigint, max(age)
FROM (
    SELECT event_type, count(*) AS pending, 0 AS dead, now() - min(created_at) AS age
    FROM {{schema}}.events WHERE published_at IS NULL AND dead_at IS NULL AND available_at IS NOT NULL
    GROUP BY event_type
    UNION ALL
    SELECT event_type, 0, count(*), NULL
    FROM {{schema}}.events WHERE dead_at IS NOT NULL AND discarded_at IS NULL
    GROUP BY event_type
) t
GROUP BY event_type
ORDER BY event_type
