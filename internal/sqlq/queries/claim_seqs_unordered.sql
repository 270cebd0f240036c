-- claim_seqs_unordered: claim_unordered.sql's statement over the rows a change-data-
-- capture source named by seq (claim_seqs_unordered_pick.sql picks them): it claims them
-- and marks them published in the relay's claim transaction, as the polling claim does;
-- what the sink does not take is put back by settle_keep.sql before the commit (ADR 0004).
-- Columns: claim_columns.sql's, the attempts, then claim_seen.sql's.
{{include claim_floor}}
{{include claim_seqs_unordered_pick}}
UPDATE {{schema}}.events e
SET published_at = now(), attempts = e.attempts + 1
-- = ANY(ARRAY(…)): one primary-key probe per picked row whatever the plan; a join here
-- became a sequential scan of the table in the generic plan (142 ms against 15 ms for
-- 1,000 rows of a 200k backlog).
WHERE e.seq = ANY(ARRAY(SELECT seq FROM picked))
RETURNING {{include claim_columns}}, e.attempts - 1,
    {{include claim_seen}}
