-- dead_list: dead letters in write order, from events_held, at most @limit.
SELECT id, seq, aggregate_type, aggregate_id, event_type, attempts, coalesce(last_error, '') AS last_error, dead_at
FROM {{schema}}.events
WHERE dead_at IS NOT NULL AND discarded_at IS NULL
ORDER BY seq
LIMIT @limit
