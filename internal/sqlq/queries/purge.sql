-- purge: retention, one small key range [@from, @from + @size) of seq per statement.
-- Deletes rows published before the cutoff, now() minus @keep_ms milliseconds (the
-- database's clock, not the relay's: a relay host's clock may be off); with @archive first
-- copies a slim row to events_archive. Returns the number deleted and whether the range
-- held a row created at or after the cutoff (then the purge run stops: everything
-- further is newer).
-- The state (published before the cutoff) is re-checked in the DELETE itself, so a row
-- replayed or changed meanwhile is never removed; dead and pending rows are never purged.
WITH cutoff AS MATERIALIZED (
    SELECT now() - @keep_ms::bigint * interval '1 millisecond' AS at
), doomed AS (
    SELECT seq FROM {{schema}}.events
    WHERE seq >= @from AND seq < @from + @size AND published_at < (SELECT at FROM cutoff)
), archived AS (
    INSERT INTO {{schema}}.events_archive (id, seq, aggregate_type, aggregate_id, aggregate_version, event_type, created_at, published_at)
    SELECT e.id, e.seq, e.aggregate_type, e.aggregate_id, e.aggregate_version, e.event_type, e.created_at, e.published_at
    FROM {{schema}}.events e JOIN doomed d ON d.seq = e.seq
    WHERE @archive::boolean
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
), deleted AS (
    DELETE FROM {{schema}}.events e
    USING doomed d
    WHERE e.seq = d.seq AND e.published_at < (SELECT at FROM cutoff)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted),
       (SELECT count(*) FROM archived),
       EXISTS (SELECT 1 FROM {{schema}}.events WHERE seq >= @from AND seq < @from + @size AND created_at >= (SELECT at FROM cutoff))
