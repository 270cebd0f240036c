-- tail: up to 500 events after seq $1, in seq order (the primary key); $2: with JSON
-- payloads. A debugging aid: a row that commits after a higher seq was shown is missed
-- (the relay never reads by offset; tail does).
SELECT id, seq, aggregate_type, aggregate_id, event_type, created_at,
       CASE WHEN published_at IS NOT NULL THEN 'published'
            WHEN discarded_at IS NOT NULL THEN 'discarded'
            WHEN dead_at IS NOT NULL THEN 'dead'
            ELSE 'pending' END AS state,
       CASE WHEN $2::bool THEN payload::text::bytea END AS payload
FROM {{schema}}.events
WHERE seq > $1
ORDER BY seq
LIMIT 500
