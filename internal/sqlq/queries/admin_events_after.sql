-- admin_events_after: one page of events matching the admin filter ($1–$6, see
-- admin_filter) and state $7 ('' any; pending, dead, published, discarded), in write order
-- after seq $8, at most $9 rows. The state predicates are the partial indexes' own
-- (events_pending, events_held), so a custom plan for state 'dead' or 'pending' walks
-- those; the generic plan walks the primary key from $8 and filters.
SELECT e.seq, e.id, e.event_type, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0),
       e.partition, {{include admin_state}}, e.created_at, e.available_at, e.attempts,
       coalesce(e.last_error, ''), e.published_at, e.dead_at, e.discarded_at
FROM {{schema}}.events e
WHERE {{include admin_filter}}
  AND ($7::text = ''
       OR ($7::text = 'pending' AND e.published_at IS NULL AND e.dead_at IS NULL)
       OR ($7::text = 'dead' AND e.dead_at IS NOT NULL AND e.discarded_at IS NULL)
       OR ($7::text = 'published' AND e.published_at IS NOT NULL)
       OR ($7::text = 'discarded' AND e.discarded_at IS NOT NULL))
  AND e.seq > $8::bigint
ORDER BY e.seq
LIMIT $9
