-- poison_candidates_unordered: the seqs claim_unordered.sql would claim (its parameters),
-- without marking or reading them; as poison_candidates_ordered.sql.
{{include claim_floor}}
{{include claim_unordered_pick}}
SELECT seq FROM picked ORDER BY seq
