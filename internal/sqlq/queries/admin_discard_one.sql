-- admin_discard_one: discard event @id if it is not published and not discarded (dead or
-- pending; checked in WHERE — a row a relay is publishing is waited for and re-checked, so
-- if that publish succeeds it is not discarded), audited in the same statement: @actor,
-- @reason, @filter_json (jsonb). Returns the count discarded (0 or 1) and the audit row's id.
WITH discarded AS (
    UPDATE {{schema}}.events e
    SET dead_at = coalesce(e.dead_at, now()), discarded_at = now(),
        last_error = coalesce(e.last_error, 'discarded: ' || @reason)
    WHERE e.id = @id::uuid AND e.published_at IS NULL AND e.discarded_at IS NULL
    RETURNING e.id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids, filter)
    SELECT 'discard', @actor, @reason, array_agg(id), @filter_json::jsonb FROM discarded HAVING count(*) > 0
    RETURNING id
)
SELECT (SELECT count(*) FROM discarded), (SELECT id FROM audit)
