-- admin_events_pending: one page of pending events (events_pending's predicate) matching
-- the admin filter, in write order after seq @after, at most @limit.
SELECT {{include admin_event_columns}}
FROM {{schema}}.events e
WHERE e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at IS NOT NULL AND {{include admin_filter}}
  AND e.seq > @after::bigint
ORDER BY e.seq
LIMIT @limit
