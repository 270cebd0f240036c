-- poison_try_keep: do to the rows @seqs what claim_ordered.sql and
-- claim_unordered.sql do to a batch — mark them published, count the attempt, return
-- claim_columns.sql's columns — in a transaction the relay rolls back, to see whether
-- these rows alone make the claim fail (a value the server cannot render, a trigger that
-- raises, a value the relay cannot read). Pending rows only.
UPDATE {{schema}}.events e
SET published_at = now(), attempts = e.attempts + 1
WHERE e.seq = ANY(@seqs::bigint[]) AND e.published_at IS NULL AND e.dead_at IS NULL
RETURNING {{include claim_columns}}, e.attempts - 1
