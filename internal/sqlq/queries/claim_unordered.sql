-- claim_unordered: claim the next batch in unordered mode and mark it published in the
-- same statement, inside the relay's claim transaction (keep-then-delete and
-- keep-then-archive retention; claim_unordered_delete.sql deletes instead). How the rows
-- are picked: claim_unordered_pick.sql.
--
-- The claim counts the attempt and sets published_at before the sink has the messages:
-- the transaction stays open while the relay publishes, so a crash or a rollback (sink
-- down) undoes the mark, and the messages the sink refused are put back by
-- settle_keep.sql before the commit. When every message goes out, as usual, the batch
-- costs one write per row, as a plain UPDATE … RETURNING loop does, instead of a lock
-- and then an update (ADR 0004).
--
-- Columns: claim_columns.sql's, the attempts before this claim, then claim_seen.sql's.
{{include claim_floor}}
{{include claim_unordered_pick}}
UPDATE {{schema}}.events e
SET published_at = now(), attempts = e.attempts + 1
-- = ANY(ARRAY(…)): one primary-key probe per picked row whatever the plan; a join here
-- became a sequential scan of the table in the generic plan (142 ms against 15 ms for
-- 1,000 rows of a 200k backlog).
WHERE e.seq = ANY(ARRAY(SELECT seq FROM picked))
RETURNING {{include claim_columns}}, e.attempts - 1,
    {{include claim_seen}}
