-- admin_replay: replay every dead letter (dead, not discarded: checked in WHERE) matching
-- the admin filter (see admin_filter) in one statement, and audit it in the same one:
-- @actor, @reason, the filter as the operator gave it @filter_json (jsonb), the ids it
-- matched.
-- Set-based: the page sends a filter, never a list of ids. The caller runs it in a
-- transaction and rolls back when the count is not what the operator confirmed (or is over
-- the bulk limit). Discarded events never match, so none is replayed out of order.
-- Returns the count replayed and the audit row's id (NULL when nothing matched).
WITH replayed AS (
    UPDATE {{schema}}.events e
    SET dead_at = NULL, attempts = 0, available_at = now()
    WHERE e.dead_at IS NOT NULL AND e.discarded_at IS NULL AND {{include admin_filter}}
    RETURNING e.id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids, filter)
    SELECT 'replay', @actor, @reason, array_agg(id), @filter_json::jsonb FROM replayed HAVING count(*) > 0
    RETURNING id
)
SELECT (SELECT count(*) FROM replayed), (SELECT id FROM audit)
