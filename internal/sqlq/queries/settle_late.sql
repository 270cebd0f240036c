-- settle_late: settle, in a transaction of their own, the rows of a batch whose Publish
-- calls were still running when the batch committed (settle_keep.sql or
-- settle_delete.sql left them 'held': pending, not available before $5). $1 seq,
-- $2 outcome ('published', 'retry', 'dead', 'deferred', 'untouched', as in
-- settle_keep.sql), $3 error (null: keep the last one), $4 delay in ms; $5 the time
-- the rows are held until: a row is changed only while it still holds exactly that
-- (it is this batch's: a relay that took it over after the hold ran out has claimed
-- it since, and its state is that relay's); $6 delete-on-publish: a published row is
-- deleted rather than marked.
WITH i AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS i(seq, outcome, error, delay_ms)
), gone AS (
    DELETE FROM {{schema}}.events e
    USING i
    WHERE $6::boolean AND i.outcome = 'published' AND e.seq = i.seq
      AND e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at = $5::timestamptz
)
UPDATE {{schema}}.events e
SET published_at = CASE WHEN i.outcome = 'published' THEN now() END,
    attempts     = CASE WHEN i.outcome IN ('untouched', 'deferred') THEN e.attempts ELSE e.attempts + 1 END,
    dead_at      = CASE WHEN i.outcome = 'dead' THEN now() END,
    last_error   = coalesce(i.error, e.last_error),
    available_at = CASE WHEN i.outcome IN ('retry', 'deferred') THEN clock_timestamp() + i.delay_ms * interval '1 millisecond' ELSE now() END
FROM i
WHERE NOT ($6::boolean AND i.outcome = 'published') AND e.seq = i.seq
  AND e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at = $5::timestamptz
