-- select_ids: the events a replay or discard would change, in write order: those named
-- by id ($1 uuid[]), by aggregate ($2 type, $3 id; null: none), or by event type ($5;
-- null: none) written at or after $6. $4: true for a replay (dead, not discarded: from
-- events_held), false for a discard (not published and not discarded: pending from
-- events_pending, or dead from events_held).
SELECT id FROM (
    SELECT id, seq FROM {{schema}}.events
    WHERE dead_at IS NOT NULL AND discarded_at IS NULL
      AND (id = ANY($1::uuid[]) OR (aggregate_type = $2 AND aggregate_id = $3)
           OR (event_type = $5 AND created_at >= $6::timestamptz))
    UNION
    SELECT id, seq FROM {{schema}}.events
    WHERE NOT $4::bool AND published_at IS NULL AND dead_at IS NULL
      AND (id = ANY($1::uuid[]) OR (aggregate_type = $2 AND aggregate_id = $3)
           OR (event_type = $5 AND created_at >= $6::timestamptz))
) AS m
ORDER BY seq
