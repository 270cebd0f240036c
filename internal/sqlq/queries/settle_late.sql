-- settle_late: settle, in a transaction of their own, the rows of a batch whose Publish
-- calls were still running when the batch committed (settle_keep.sql or
-- settle_delete.sql left them 'held': pending, not available before @held_until).
-- Parameters, by name (relay/late.go's lateSettle): settle_keep.sql's @seqs, @outcomes
-- ('published', 'retry', 'dead', 'deferred', 'untouched'), @errors and @delays_ms;
-- @held_until, the time the rows are held until: a row is changed only while it still
-- holds exactly that (it is this batch's: a relay that took it over after the hold ran
-- out has claimed it since, and its state is that relay's); @deletes: delete-on-publish,
-- a published row is deleted rather than marked.
--
-- Each row is looked up by its seq and locked (FOR UPDATE: a relay claiming it now is
-- waited for, and the row checked again once it is done), then changed by its ctid. The
-- checks are in the lookup, never beside the join: the planner estimates "held until
-- @held_until" at one row (no row held that value when the table was analyzed), and beside a
-- join that estimate made it scan the table once and the parameter list once per row
-- (4,992 late rows: 25M comparisons, 13-29 s, and the settle timed out).
WITH i AS MATERIALIZED (
    SELECT * FROM unnest(@seqs::bigint[], @outcomes::text[], @errors::text[], @delays_ms::bigint[]) AS i(seq, outcome, error, delay_ms)
), held AS MATERIALIZED (
    -- a locking subquery is planned on its own, per row of i: one primary-key lookup each
    SELECT i.*, h.ctid
    FROM i
    CROSS JOIN LATERAL (
        SELECT e.ctid FROM {{schema}}.events e
        WHERE e.seq = i.seq
          AND e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at = @held_until::timestamptz
        FOR UPDATE
    ) h
), gone AS (
    DELETE FROM {{schema}}.events e
    WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM held WHERE @deletes::boolean AND outcome = 'published'))
)
UPDATE {{schema}}.events e
SET published_at = CASE WHEN h.outcome = 'published' THEN now() END,
    attempts     = CASE WHEN h.outcome IN ('untouched', 'deferred') THEN e.attempts ELSE e.attempts + 1 END,
    dead_at      = CASE WHEN h.outcome = 'dead' THEN now() END,
    last_error   = coalesce(h.error, e.last_error),
    available_at = CASE WHEN h.outcome IN ('retry', 'deferred') THEN clock_timestamp() + h.delay_ms * interval '1 millisecond' ELSE now() END
FROM held h
WHERE e.ctid = h.ctid AND NOT (@deletes::boolean AND h.outcome = 'published')
