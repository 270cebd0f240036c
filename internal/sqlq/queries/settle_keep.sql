-- settle_keep: undo the claim's mark (claim_ordered.sql, claim_unordered.sql) for the
-- messages of a batch that were not published, in the same transaction. Parameters, by
-- name (relay/settle.go's rowOutcomes), one element per row: @seqs; @outcomes: 'retry' (back to pending after a delay, the attempt counted), 'dead',
-- 'deferred' (the sink was down for it while others went out: back to pending after a
-- delay, no attempt counted), 'untouched' (never sent: back to pending as it was, no
-- attempt counted) or 'held' (its Publish call still running after the batch: pending,
-- not available until the delay has passed, no attempt counted yet — settle_late.sql
-- settles it when the call returns); @errors (null: keep the last one); @delays_ms,
-- counted from the moment the statement runs (clock_timestamp(): the batch's publish may
-- have taken a while since the transaction began; a Retry-After the broker asked for is
-- honoured in full) — a held row's from the transaction's start, now(), the token the
-- relay computes.
UPDATE {{schema}}.events e
SET published_at = NULL,
    attempts     = CASE WHEN i.outcome IN ('untouched', 'deferred', 'held') THEN e.attempts - 1 ELSE e.attempts END,
    dead_at      = CASE WHEN i.outcome = 'dead' THEN now() END,
    last_error   = coalesce(i.error, e.last_error),
    available_at = CASE WHEN i.outcome IN ('retry', 'deferred') THEN clock_timestamp() + i.delay_ms * interval '1 millisecond'
                        WHEN i.outcome = 'held' THEN now() + i.delay_ms * interval '1 millisecond' ELSE e.available_at END
FROM unnest(@seqs::bigint[], @outcomes::text[], @errors::text[], @delays_ms::bigint[]) AS i(seq, outcome, error, delay_ms)
WHERE e.seq = i.seq
