-- admin_discard: discard every dead letter (dead, not discarded: checked in WHERE, and
-- events_held's predicate, so even a generic plan walks that index) matching the admin
-- filter (see admin_filter) in one statement, audited in the same one: @actor, @reason,
-- and the filter as the operator gave it, @filter_json (jsonb). A discarded event is never published and holds nothing.
-- Pending events are discarded one at a time, by id (admin_discard_one). Returns the
-- count discarded and the audit row's id.
WITH discarded AS (
    UPDATE {{schema}}.events e
    SET discarded_at = now(), last_error = coalesce(e.last_error, 'discarded: ' || @reason)
    WHERE e.dead_at IS NOT NULL AND e.discarded_at IS NULL AND {{include admin_filter}}
    RETURNING e.id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids, filter)
    SELECT 'discard', @actor, @reason, array_agg(id), @filter_json::jsonb FROM discarded HAVING count(*) > 0
    RETURNING id
)
SELECT (SELECT count(*) FROM discarded), (SELECT id FROM audit)
