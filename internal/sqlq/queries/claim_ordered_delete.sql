-- claim_ordered_delete: claim_ordered.sql for delete-on-publish retention: the claimed
-- rows are deleted in the claim statement, inside the relay's claim transaction. A crash
-- or a rollback undoes the delete; the messages the sink refused are inserted again,
-- whole, by settle_delete.sql before the commit. Parameters and how the rows are
-- picked: claim_ordered_pick.sql. Columns: claim_columns.sql's, the attempts before
-- this claim, then claim_seen.sql's, then the types that filled their share of the heads
-- (shares_full in claim_ordered_pick.sql).
{{include claim_floor}}
{{include claim_ordered_pick}}
{{include claim_ordered_lock}}
DELETE FROM {{schema}}.events e
-- = ANY(ARRAY(…)): a TID scan of the locked rows whatever the plan (claim_unordered.sql)
WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
RETURNING {{include claim_columns}}, e.attempts,
    {{include claim_seen}}, (SELECT types FROM shares_full)
