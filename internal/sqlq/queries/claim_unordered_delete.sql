-- claim_unordered_delete: claim_unordered.sql for delete-on-publish retention: the
-- claimed rows are deleted in the claim statement, inside the relay's claim
-- transaction. A crash or a rollback undoes the delete; the messages the sink refused
-- are inserted again, whole, by settle_delete.sql before the commit. How the rows are
-- picked: claim_unordered_pick.sql. Columns: claim_columns.sql's, the attempts, then claim_seen.sql's.
{{include claim_floor}}
{{include claim_unordered_pick}}
DELETE FROM {{schema}}.events e
-- = ANY(ARRAY(…)): as in claim_unordered.sql
WHERE e.seq = ANY(ARRAY(SELECT seq FROM picked))
RETURNING {{include claim_columns}}, e.attempts,
    {{include claim_seen}}
