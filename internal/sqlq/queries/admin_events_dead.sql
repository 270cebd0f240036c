-- admin_events_dead: one page of dead letters (dead, not discarded: events_held's
-- predicate) matching the admin filter, in write order after seq @after, at most @limit.
SELECT {{include admin_event_columns}}
FROM {{schema}}.events e
WHERE e.dead_at IS NOT NULL AND e.discarded_at IS NULL AND {{include admin_filter}}
  AND e.seq > @after::bigint
ORDER BY e.seq
LIMIT @limit
