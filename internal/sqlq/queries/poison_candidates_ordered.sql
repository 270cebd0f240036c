-- poison_candidates_ordered: the seqs claim_ordered.sql would claim, with its parameters,
-- without marking or reading them: when the claim failed on a row's content, the relay
-- looks for that row among these (relay/poison.go). Run in a transaction the relay rolls
-- back (the rows are locked meanwhile, as the claim would).
{{include claim_floor}}
{{include claim_ordered_pick}}
{{include claim_ordered_lock}}
SELECT e.seq FROM {{schema}}.events e
WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
ORDER BY e.seq
