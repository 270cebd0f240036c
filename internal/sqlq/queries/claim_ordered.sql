-- claim_ordered: claim the next batch in ordered mode and mark it published in the same
-- statement, inside the relay's claim transaction. Parameters and how the rows are
-- picked: claim_ordered_pick.sql.
--
-- Claimed rows are marked published (attempt counted) before the sink has them, as in
-- claim_unordered.sql: the transaction stays open while the relay publishes, a crash or
-- a rollback undoes the mark, and what the sink did not take is put back by
-- settle_keep.sql before the commit (ADR 0004). Columns: claim_columns.sql's, the
-- attempts before this claim, then claim_seen.sql's, then the types that filled their share of the heads
-- (shares_full in claim_ordered_pick.sql).
{{include claim_floor}}
{{include claim_ordered_pick}}
{{include claim_ordered_lock}}
UPDATE {{schema}}.events e
SET published_at = now(), attempts = e.attempts + 1
-- = ANY(ARRAY(…)): a TID scan of the locked rows whatever the plan (claim_unordered.sql)
WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
RETURNING {{include claim_columns}}, e.attempts - 1,
    {{include claim_seen}}, (SELECT types FROM shares_full)
