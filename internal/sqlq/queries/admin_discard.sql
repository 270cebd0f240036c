-- admin_discard: discard every dead letter (dead, not discarded: checked in WHERE, and
-- events_held's predicate, so even a generic plan walks that index) matching the admin
-- filter ($1–$6, see admin_filter) in one statement, audited in the same one: actor $7,
-- reason $8, filter $9 (jsonb). A discarded event is never published and holds nothing.
-- Pending events are discarded one at a time, by id (admin_discard_one). Returns the
-- count discarded and the audit row's id.
WITH discarded AS (
    UPDATE {{schema}}.events e
    SET discarded_at = now(), last_error = coalesce(e.last_error, 'discarded: ' || $8)
    WHERE e.dead_at IS NOT NULL AND e.discarded_at IS NULL AND {{include admin_filter}}
    RETURNING e.id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids, filter)
    SELECT 'discard', $7, $8, array_agg(id), $9::jsonb FROM discarded HAVING count(*) > 0
    RETURNING id
)
SELECT (SELECT count(*) FROM discarded), (SELECT id FROM audit)
