-- claim_unordered_pick: the rows an unordered claim takes, as the CTE picked (their
-- seqs), locked. Not a statement: claim_unordered.sql (mark them published),
-- claim_unordered_delete.sql (delete them) and poison_candidates_unordered.sql (list
-- them) include it after claim_floor.sql (@floor, @replays) and finish it. @batch_size:
-- the batch size (relay/claim.go's unorderedClaim binds them by name). The oldest
-- available pending rows that no other relay holds: a walk of events_pending in seq order, SKIP LOCKED, from the lowest pending
-- row claim_floor.sql found (from its bound: no pending row is below it, so neither
-- walks the dead entries of the rows drained before it; and this one does not walk
-- again those that part walked past).
picked AS (
    SELECT seq FROM {{schema}}.events
    WHERE published_at IS NULL AND dead_at IS NULL
      AND available_at <= now()
      AND seq >= (SELECT min_pending FROM seen)
      -- not paused (claim_floor.sql): a paused row is stepped over, not claimed
      AND NOT (SELECT everything FROM paused)
      AND NOT aggregate_type = ANY((SELECT types FROM paused)::text[])
      AND NOT partition * (SELECT n FROM paused) / 4096 = ANY((SELECT parts FROM paused)::int[])
    ORDER BY seq
    LIMIT @batch_size
    FOR UPDATE SKIP LOCKED
)
