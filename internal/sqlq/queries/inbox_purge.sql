-- inbox_purge: deletes one batch of a consumer's dedup rows older than a cutoff, of the
-- final outcomes only (a parked or quarantined event's row stays while the event waits).
-- Oldest first through the partial index inbox_processed_at; SKIP LOCKED so a purge never
-- waits behind (or blocks) a transaction settling a row. $1 consumer, $2 cutoff,
-- $3 batch size.
DELETE FROM {{schema}}.inbox
WHERE (consumer, event_id) IN (
    SELECT consumer, event_id FROM {{schema}}.inbox
    WHERE outcome IN ('applied', 'stale') AND processed_at < $2 AND consumer = $1
    ORDER BY processed_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
