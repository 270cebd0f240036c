-- admin_discard: discard every event matching the admin filter ($1–$6, see admin_filter)
-- that is dead and not discarded — and, when $10, also pending ones (a single event by id)
-- — in one statement, audited in the same one: actor $7, reason $8, filter $9 (jsonb).
-- Published and discarded rows never match (checked in WHERE; a row a relay is publishing
-- is waited for and re-checked). Returns the count discarded and the audit row's id.
WITH discarded AS (
    UPDATE {{schema}}.events e
    SET dead_at = coalesce(e.dead_at, now()), discarded_at = now(),
        last_error = coalesce(e.last_error, 'discarded: ' || $8)
    WHERE e.published_at IS NULL AND e.discarded_at IS NULL
      AND (e.dead_at IS NOT NULL OR $10::bool)
      AND {{include admin_filter}}
    RETURNING e.id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids, filter)
    SELECT 'discard', $7, $8, array_agg(id), $9::jsonb FROM discarded HAVING count(*) > 0
    RETURNING id
)
SELECT (SELECT count(*) FROM discarded), (SELECT id FROM audit)
