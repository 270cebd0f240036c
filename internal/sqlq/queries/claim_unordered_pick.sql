-- claim_unordered_pick: the rows an unordered claim takes, as the CTE picked (their
-- seqs), locked. Not a statement: claim_unordered.sql (mark them published),
-- claim_unordered_delete.sql (delete them) and poison_candidates_unordered.sql (list
-- them) include it and finish it. $1: batch size. The oldest available pending rows that
-- no other relay holds: a walk of events_pending in seq order, SKIP LOCKED.
WITH picked AS (
    SELECT seq FROM {{schema}}.events
    WHERE published_at IS NULL AND dead_at IS NULL
      AND available_at <= now()
    ORDER BY seq
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
