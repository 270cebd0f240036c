-- replay: make dead (or discarded) events pending again, with a fresh attempt budget,
-- and record who did it and why. Only rows that are dead are changed (checked in WHERE).
-- $1 ids (uuid[]); $2 actor; $3 reason. Returns the ids replayed.
WITH replayed AS (
    UPDATE {{schema}}.events
    SET dead_at = NULL, discarded_at = NULL, attempts = 0, available_at = now()
    WHERE id = ANY($1::uuid[]) AND dead_at IS NOT NULL
    RETURNING id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids)
    SELECT 'replay', $2, $3, array_agg(id) FROM replayed HAVING count(*) > 0
)
SELECT id FROM replayed
