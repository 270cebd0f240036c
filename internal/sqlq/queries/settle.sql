-- settle: record the outcome of a published batch, in the claim transaction, one
-- statement for every row. Each row's expected state (pending) is checked in WHERE, so a
-- row that is no longer pending is left alone. (Repeating the join key as e.seq = ANY($1)
-- made pgx's generic plan re-scan the array per row: 54 ms instead of 6 for 1,000 rows.)
--
-- $1 seq[]; $2 outcome[] ('published' | 'retry' | 'dead'); $3 error[] (null for published);
-- $4 retry delay in milliseconds[]; $5 delete published rows (retention: delete on publish).
--
-- Fencing (ordered mode): $6 is this relay's owner id, $7/$8 the relay partitions and
-- epochs it believes it leases, $9 the relay partition count. A row is changed only if
-- its relay partition's lease is still held at that epoch; the lease rows are locked
-- FOR SHARE until commit, so a relay taking a lease over (which bumps the epoch) waits
-- for, or skips, this commit: a zombie's late marks never overwrite the new owner's.
-- With $6 null (unordered mode, no leases) there is no fence.
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS u(seq, outcome, error, delay_ms)
), fence AS (
    SELECT l.partition
    FROM {{schema}}.leases l
    JOIN unnest($7::int[], $8::bigint[]) AS m(partition, epoch) ON m.partition = l.partition AND m.epoch = l.epoch
    WHERE l.owner = $6
    FOR SHARE OF l
), deleted AS (
    DELETE FROM {{schema}}.events e
    USING input i
    WHERE $5::boolean AND i.outcome = 'published'
      AND e.seq = i.seq AND e.published_at IS NULL AND e.dead_at IS NULL
      AND ($6::text IS NULL OR e.partition * $9::int / 4096 IN (SELECT partition FROM fence))
    RETURNING e.seq
), updated AS (
    UPDATE {{schema}}.events e
    SET attempts     = e.attempts + 1,
        published_at = CASE WHEN i.outcome = 'published' THEN now() END,
        dead_at      = CASE WHEN i.outcome = 'dead' THEN now() END,
        last_error   = coalesce(i.error, e.last_error),
        available_at = CASE WHEN i.outcome = 'retry' THEN now() + i.delay_ms * interval '1 millisecond' ELSE e.available_at END
    FROM input i
    WHERE NOT ($5::boolean AND i.outcome = 'published')
      AND e.seq = i.seq AND e.published_at IS NULL AND e.dead_at IS NULL
      AND ($6::text IS NULL OR e.partition * $9::int / 4096 IN (SELECT partition FROM fence))
    RETURNING e.seq
)
SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM updated)
