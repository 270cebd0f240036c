-- claim_seqs_unordered_pick: the rows an unordered by-seq claim takes, as the CTE picked
-- (their seqs), locked. Not a statement: claim_seqs_unordered.sql (mark them published)
-- and claim_seqs_unordered_delete.sql (delete them) include it after claim_floor.sql
-- (@floor, @replays) and finish it. @seqs (bigint[]): the seqs a change-data-capture
-- source read from the WAL (relay/seqs.go's unorderedSeqClaim binds them by name). Of
-- those, the rows still pending, available and not paused that no other relay holds: a
-- primary-key lookup each, no walk of the pending indexes. A row left out stays pending
-- for the polling claims (docs/adr/0026-cdc-discovers-the-table-keeps-the-state.md).
picked AS (
    SELECT seq FROM {{schema}}.events
    WHERE seq = ANY(@seqs::bigint[])
      AND published_at IS NULL AND dead_at IS NULL
      AND available_at <= now()
      -- not paused (claim_floor.sql)
      AND NOT (SELECT everything FROM paused)
      AND NOT aggregate_type = ANY((SELECT types FROM paused)::text[])
      AND NOT partition * (SELECT n FROM paused) / 4096 = ANY((SELECT parts FROM paused)::int[])
    ORDER BY seq
    FOR UPDATE SKIP LOCKED
)
