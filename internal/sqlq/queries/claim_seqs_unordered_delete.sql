-- claim_seqs_unordered_delete: claim_unordered_delete.sql's statement over the rows a
-- change-data-capture source named by seq (claim_seqs_unordered_pick.sql picks them): it
-- claims them and deletes them in the relay's claim transaction, as the polling claim
-- does; what the sink does not take is put back by settle_delete.sql before the commit
-- (ADR 0004). Columns: claim_columns.sql's, the attempts, then claim_seen.sql's.
{{include claim_floor}}
{{include claim_seqs_unordered_pick}}
DELETE FROM {{schema}}.events e
-- = ANY(ARRAY(…)): as in claim_unordered.sql
WHERE e.seq = ANY(ARRAY(SELECT seq FROM picked))
RETURNING {{include claim_columns}}, e.attempts,
    {{include claim_seen}}
