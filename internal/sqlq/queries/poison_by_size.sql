-- poison_by_size: the rows @seqs largest first, as stored (pg_column_size: after
-- compression): the order in which the relay tries the rows of a claim that failed on
-- content, since a row that cannot be rendered is likely a large one (relay/poison.go).
SELECT e.seq FROM {{schema}}.events e
WHERE e.seq = ANY(@seqs::bigint[])
ORDER BY pg_column_size(e.*) DESC, e.seq
