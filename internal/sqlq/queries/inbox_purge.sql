-- inbox_purge: deletes one batch of a consumer's dedup rows older than a cutoff, of the
-- final outcomes only (a parked or quarantined event's row stays while the event waits).
-- Oldest first through the partial index inbox_processed_at; SKIP LOCKED so a purge never
-- waits behind (or blocks) a transaction settling a row.
DELETE FROM {{schema}}.inbox
WHERE (consumer, event_id) IN (
    SELECT consumer, event_id FROM {{schema}}.inbox
    WHERE outcome IN ('applied', 'stale') AND processed_at < @cutoff AND consumer = @consumer
    ORDER BY processed_at
    LIMIT @batch_size
    FOR UPDATE SKIP LOCKED
)
