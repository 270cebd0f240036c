-- settle: record the outcome of a published batch, in the claim transaction, one
-- statement for every row. Each row's expected state (pending) is checked in WHERE, so a
-- row that is no longer pending is left alone.
--
-- $1 seq[]; $2 outcome[] ('published' | 'retry' | 'dead'); $3 error[] (null for published);
-- $4 retry delay in milliseconds[]; $5 delete published rows (retention: delete on publish).
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS u(seq, outcome, error, delay_ms)
), deleted AS (
    DELETE FROM {{schema}}.events e
    USING input i
    WHERE $5::boolean AND i.outcome = 'published'
      AND e.seq = i.seq AND e.published_at IS NULL AND e.dead_at IS NULL
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
    RETURNING e.seq
)
SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM updated)
