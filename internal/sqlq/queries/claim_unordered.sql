-- claim_unordered: lock the next batch in unordered mode, inside the relay's claim
-- transaction: the oldest available pending rows of the partition range that no other
-- relay holds. $1: event partitions (int[]; null: all); $2: batch size. Walks events_pending in seq order.
SELECT e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
       e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
       coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
       e.attempts, 1 AS rn, true AS ready
FROM {{schema}}.events e
WHERE e.published_at IS NULL AND e.dead_at IS NULL
  AND ($1::int[] IS NULL OR e.partition = ANY($1::int[]))
  AND e.available_at <= now()
ORDER BY e.seq
LIMIT $2
FOR UPDATE OF e SKIP LOCKED
