-- inbox_unpark: deletes the aggregate's parked events up to the new last version, in one
-- statement, and settles their dedup rows: those above $5 (the version of the event
-- that closed the gap) were applied after it; those at or below it were overtaken (the
-- Apply policy skipped past them) and are stale. $1 consumer, $2 aggregate type,
-- $3 aggregate id, $4 new last version, $5 the closing event's version.
WITH gone AS (
    DELETE FROM {{schema}}.inbox_parked
    WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND aggregate_version <= $4
    RETURNING event_id, aggregate_version
)
UPDATE {{schema}}.inbox i
SET outcome = CASE WHEN g.aggregate_version > $5 THEN 'applied' ELSE 'stale' END, processed_at = now()
FROM gone g
WHERE i.consumer = $1 AND i.event_id = g.event_id
