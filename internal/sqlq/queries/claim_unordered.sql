-- claim_unordered: claim the next batch in unordered mode and mark it published in the
-- same statement, inside the relay's claim transaction (keep-then-delete and
-- keep-then-archive retention; claim_unordered_delete.sql deletes instead).
--
-- $1: batch size. Picks the oldest available pending rows that no other relay holds (a
-- walk of events_pending in seq order, SKIP LOCKED), counts the attempt and sets
-- published_at before the sink has the messages:
-- the transaction stays open while the relay publishes, so a crash or a rollback
-- (sink down) undoes the mark, and the messages the sink refused are put back by
-- unclaim_keep.sql before the commit. When every message goes out, as usual, the batch
-- costs one write per row, as a plain UPDATE … RETURNING loop does, instead of a lock
-- and then an update (ADR 0004).
--
-- Columns: the message's, the attempts before this claim, then what
-- unclaim needs: available_at, last_error, whether the payload is jsonb.
WITH picked AS (
    SELECT seq FROM {{schema}}.events
    WHERE published_at IS NULL AND dead_at IS NULL
      AND available_at <= now()
    ORDER BY seq
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE {{schema}}.events e
SET published_at = now(), attempts = e.attempts + 1
-- = ANY(ARRAY(…)): one primary-key probe per picked row whatever the plan; a join here
-- became a sequential scan of the table in the generic plan (142 ms against 15 ms for
-- 1,000 rows of a 200k backlog).
WHERE e.seq = ANY(ARRAY(SELECT seq FROM picked))
RETURNING e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
          e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
          coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
          e.attempts - 1,
          e.available_at, e.last_error, e.payload IS NOT NULL
