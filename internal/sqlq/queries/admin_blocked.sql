-- admin_blocked: aggregates held by dead events (dead, not discarded), oldest first, after
-- the first dead seq @after, at most @limit: the first dead event, how many are dead, and how many
-- pending events wait behind them (in ordered mode, unless the relay publishes past dead
-- events of that aggregate type). Reads events_held, then events_pending_aggregate per
-- aggregate listed.
SELECT h.aggregate_type, h.aggregate_id, h.first_seq, h.dead,
       (SELECT e.id FROM {{schema}}.events e WHERE e.seq = h.first_seq),
       (SELECT count(*) FROM {{schema}}.events p
        WHERE p.aggregate_type = h.aggregate_type AND p.aggregate_id = h.aggregate_id
          AND p.published_at IS NULL AND p.dead_at IS NULL)
FROM (
    SELECT aggregate_type, aggregate_id, min(seq) AS first_seq, count(*) AS dead
    FROM {{schema}}.events
    WHERE dead_at IS NOT NULL AND discarded_at IS NULL
    GROUP BY aggregate_type, aggregate_id
    HAVING min(seq) > @after::bigint
) h
ORDER BY h.first_seq
LIMIT @limit
