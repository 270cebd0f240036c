-- poison_try_delete: poison_try_keep.sql for delete-on-publish retention, whose claims
-- delete the rows; rolled back as well.
DELETE FROM {{schema}}.events e
WHERE e.seq = ANY(@seqs::bigint[]) AND e.published_at IS NULL AND e.dead_at IS NULL
RETURNING {{include claim_columns}}, e.attempts
