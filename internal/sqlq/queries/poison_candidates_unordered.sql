-- poison_candidates_unordered: the seqs claim_unordered.sql would claim ($1: batch size),
-- without marking or reading them; as poison_candidates_ordered.sql.
{{include claim_unordered_pick}}
SELECT seq FROM picked ORDER BY seq
