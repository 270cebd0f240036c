-- settle_late: settle, in a transaction of their own, the rows of a batch whose Publish
-- calls were still running when the batch committed (settle_keep.sql or
-- settle_delete.sql left them 'held': pending, not available before $5). $1 seq,
-- $2 outcome ('published', 'retry', 'dead', 'deferred', 'untouched', as in
-- settle_keep.sql), $3 error (null: keep the last one), $4 delay in ms; $5 the time
-- the rows are held until: a row is changed only while it still holds exactly that
-- (it is this batch's: a relay that took it over after the hold ran out has claimed
-- it since, and its state is that relay's); $6 delete-on-publish: a published row is
-- deleted rather than marked.
--
-- Each row is looked up by its seq and locked (FOR UPDATE: a relay claiming it now is
-- waited for, and the row checked again once it is done), then changed by its ctid. The
-- checks are in the lookup, never beside the join: the planner estimates "held until
-- $5" at one row (no row held that value when the table was analyzed), and beside a
-- join that estimate made it scan the table once and the parameter list once per row
-- (4,992 late rows: 25M comparisons, 13-29 s, and the settle timed out).
WITH i AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS i(seq, outcome, error, delay_ms)
), held AS MATERIALIZED (
    -- a locking subquery is planned on its own, per row of i: one primary-key lookup each
    SELECT i.*, h.ctid
    FROM i
    CROSS JOIN LATERAL (
        SELECT e.ctid FROM {{schema}}.events e
        WHERE e.seq = i.seq
          AND e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at = $5::timestamptz
        FOR UPDATE
    ) h
), gone AS (
    DELETE FROM {{schema}}.events e
    WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM held WHERE $6::boolean AND outcome = 'published'))
)
UPDATE {{schema}}.events e
SET published_at = CASE WHEN h.outcome = 'published' THEN now() END,
    attempts     = CASE WHEN h.outcome IN ('untouched', 'deferred') THEN e.attempts ELSE e.attempts + 1 END,
    dead_at      = CASE WHEN h.outcome = 'dead' THEN now() END,
    last_error   = coalesce(h.error, e.last_error),
    available_at = CASE WHEN h.outcome IN ('retry', 'deferred') THEN clock_timestamp() + h.delay_ms * interval '1 millisecond' ELSE now() END
FROM held h
WHERE e.ctid = h.ctid AND NOT ($6::boolean AND h.outcome = 'published')
