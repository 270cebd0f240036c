-- claim_seqs_ordered: claim_ordered.sql's statement over the rows a change-data-capture
-- source named by seq (claim_seqs_ordered_pick.sql picks them): it claims them and marks
-- them published in the relay's claim transaction, as the polling claim does; what the
-- sink does not take is put back by settle_keep.sql before the commit (ADR 0004). Columns:
-- claim_columns.sql's, the attempts, then claim_seen.sql's.
{{include claim_floor}}
{{include claim_seqs_ordered_pick}}
{{include claim_ordered_lock}}
UPDATE {{schema}}.events e
SET published_at = now(), attempts = e.attempts + 1
-- = ANY(ARRAY(…)): a TID scan of the locked rows whatever the plan (claim_unordered.sql)
WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
RETURNING {{include claim_columns}}, e.attempts - 1,
    {{include claim_seen}}
