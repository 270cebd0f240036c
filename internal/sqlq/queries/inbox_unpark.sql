-- inbox_unpark: deletes the aggregate's parked events up to the new last version
-- (@new_last), in one statement, and settles their dedup rows: those above
-- @closing_version (the version of the event that closed the gap) were applied after it;
-- those at or below it were overtaken (the Apply policy skipped past them) and are stale.
WITH gone AS (
    DELETE FROM {{schema}}.inbox_parked
    WHERE consumer = @consumer AND aggregate_type = @aggregate_type AND aggregate_id = @aggregate_id AND aggregate_version <= @new_last
    RETURNING event_id, aggregate_version
)
UPDATE {{schema}}.inbox i
SET outcome = CASE WHEN g.aggregate_version > @closing_version THEN 'applied' ELSE 'stale' END, processed_at = now()
FROM gone g
WHERE i.consumer = @consumer AND i.event_id = g.event_id
