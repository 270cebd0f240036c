-- purge: retention, one small key range [$1, $1 + $2) of seq per statement.
-- Deletes rows published before $3; with $4 (archive mode) first copies a slim row to
-- events_archive. Returns the number deleted and whether the range held a row created at
-- or after $3 (then the purge run stops: everything further is newer).
-- The state (published before the cutoff) is re-checked in the DELETE itself, so a row
-- replayed or changed meanwhile is never removed; dead and pending rows are never purged.
WITH doomed AS (
    SELECT seq FROM {{schema}}.events
    WHERE seq >= $1 AND seq < $1 + $2 AND published_at < $3
), archived AS (
    INSERT INTO {{schema}}.events_archive (id, seq, aggregate_type, aggregate_id, aggregate_version, event_type, created_at, published_at)
    SELECT e.id, e.seq, e.aggregate_type, e.aggregate_id, e.aggregate_version, e.event_type, e.created_at, e.published_at
    FROM {{schema}}.events e JOIN doomed d ON d.seq = e.seq
    WHERE $4::boolean
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
), deleted AS (
    DELETE FROM {{schema}}.events e
    USING doomed d
    WHERE e.seq = d.seq AND e.published_at < $3
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted),
       (SELECT count(*) FROM archived),
       EXISTS (SELECT 1 FROM {{schema}}.events WHERE seq >= $1 AND seq < $1 + $2 AND created_at >= $3)
