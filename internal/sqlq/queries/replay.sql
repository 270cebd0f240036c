-- replay: make dead events pending again, with a fresh attempt budget, and record who
-- did it and why. Only rows that are dead and not discarded are changed (checked in
-- WHERE). A discarded event is refused — and then nothing is replayed: its aggregate's
-- later events may have been published past it since, so publishing it now would go out
-- of order. @ids is a uuid[]. Returns each id replayed (false) or
-- refused as discarded (true).
WITH refused AS (
    SELECT id FROM {{schema}}.events
    WHERE id = ANY(@ids::uuid[]) AND discarded_at IS NOT NULL
), replayed AS (
    UPDATE {{schema}}.events
    SET dead_at = NULL, attempts = 0, available_at = now()
    WHERE id = ANY(@ids::uuid[]) AND dead_at IS NOT NULL AND discarded_at IS NULL
      AND NOT EXISTS (SELECT FROM refused)
    RETURNING id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids)
    SELECT 'replay', @actor, @reason, array_agg(id) FROM replayed HAVING count(*) > 0
)
SELECT id, false FROM replayed
UNION ALL
SELECT id, true FROM refused
