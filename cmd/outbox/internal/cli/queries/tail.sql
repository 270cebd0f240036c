-- tail: up to 500 events after seq @after, in seq order (the primary key); with JSON
-- payloads when @with_payload. A debugging aid: a row that commits after a higher seq was shown is missed
-- (the relay never reads by offset; tail does).
SELECT id, seq, aggregate_type, aggregate_id, event_type, created_at,
       CASE WHEN published_at IS NOT NULL THEN 'published'
            WHEN discarded_at IS NOT NULL THEN 'discarded'
            WHEN dead_at IS NOT NULL THEN 'dead'
            ELSE 'pending' END AS state,
       CASE WHEN @with_payload::bool THEN payload::text::bytea END AS payload
FROM {{schema}}.events
WHERE seq > @after
ORDER BY seq
LIMIT 500
