-- discard: give up on events that are not published (dead or pending), with a reason:
-- they become dead + discarded and no longer hold their aggregate. Only unpublished,
-- not yet discarded rows change (checked in WHERE; a row the relay holds is waited for and
-- re-checked). @ids is a uuid[]. Returns the ids discarded.
WITH discarded AS (
    UPDATE {{schema}}.events
    SET dead_at = coalesce(dead_at, now()), discarded_at = now(),
        last_error = coalesce(last_error, 'discarded: ' || @reason)
    WHERE id = ANY(@ids::uuid[]) AND published_at IS NULL AND discarded_at IS NULL
    RETURNING id
), audit AS (
    INSERT INTO {{schema}}.replays (action, actor, reason, event_ids)
    SELECT 'discard', @actor, @reason, array_agg(id) FROM discarded HAVING count(*) > 0
)
SELECT id FROM discarded
