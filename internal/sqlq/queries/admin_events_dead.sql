-- admin_events_dead: one page of dead letters (dead, not discarded: events_held's
-- predicate) matching the admin filter ($1–$6), in write order after seq $7, at most $8.
SELECT {{include admin_event_columns}}
FROM {{schema}}.events e
WHERE e.dead_at IS NOT NULL AND e.discarded_at IS NULL AND {{include admin_filter}}
  AND e.seq > $7::bigint
ORDER BY e.seq
LIMIT $8
