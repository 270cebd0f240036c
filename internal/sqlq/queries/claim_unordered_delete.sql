-- claim_unordered_delete: claim_unordered.sql for delete-on-publish retention: the
-- claimed rows are deleted in the claim statement, inside the relay's claim
-- transaction. A crash or a rollback undoes the delete; the messages the sink refused
-- are inserted again, whole, by unclaim_delete.sql before the commit. The columns are
-- claim_unordered.sql's.
WITH picked AS (
    SELECT seq FROM {{schema}}.events
    WHERE published_at IS NULL AND dead_at IS NULL
      AND available_at <= now()
    ORDER BY seq
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{schema}}.events e
-- = ANY(ARRAY(…)): as in claim_unordered.sql
WHERE e.seq = ANY(ARRAY(SELECT seq FROM picked))
RETURNING e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
          e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
          coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
          e.attempts,
          e.available_at, e.last_error, e.payload IS NOT NULL
