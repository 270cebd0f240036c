-- claim_ordered: lock the next batch in ordered mode, inside the relay's claim transaction.
--
-- $1, $2: event partition range [lo, hi]; $3: max heads; $4: max events per aggregate;
-- $5: aggregate types whose dead events do not hold their aggregate (text[]).
--
-- A row may be published only when it is its aggregate's head: no earlier pending row of
-- the aggregate exists, and no earlier dead row still holds it. Heads are found by walking
-- events_pending in seq order (oldest first), probing events_pending_aggregate and
-- events_held per row; the walk stops after $3 heads, so a blocked aggregate's rows cost
-- one probe each and never starve the others. The walk has no low-water mark: a row that
-- commits late with a lower seq is simply found on the next claim.
--
-- Each head brings up to $4-1 followers of its aggregate (pipelining within an aggregate).
-- The relay keeps, per aggregate, only the contiguous prefix (rn = 1, 2, …) of rows that
-- it locked and that are available: a row skipped by SKIP LOCKED or not yet available
-- ends its aggregate's share of the batch.
--
-- The pending predicate is repeated on the locked row (e), so a row published or killed
-- by someone else between the snapshot and the lock is re-checked and dropped.
WITH heads AS (
    SELECT h.seq, h.aggregate_type, h.aggregate_id
    FROM {{schema}}.events h
    WHERE h.published_at IS NULL AND h.dead_at IS NULL
      AND h.partition BETWEEN $1 AND $2
      AND h.available_at <= now()
      AND NOT EXISTS (
          SELECT 1 FROM {{schema}}.events p
          WHERE p.aggregate_type = h.aggregate_type AND p.aggregate_id = h.aggregate_id
            AND p.seq < h.seq AND p.published_at IS NULL AND p.dead_at IS NULL)
      AND (h.aggregate_type = ANY($5::text[]) OR NOT EXISTS (
          SELECT 1 FROM {{schema}}.events d
          WHERE d.aggregate_type = h.aggregate_type AND d.aggregate_id = h.aggregate_id
            AND d.seq < h.seq AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL))
    ORDER BY h.seq
    LIMIT $3
), picked AS (
    SELECT seq, 1 AS rn, true AS ready FROM heads
    UNION ALL
    SELECT f.seq, f.rn, f.ready
    FROM heads h
    CROSS JOIN LATERAL (
        SELECT x.seq, (row_number() OVER (ORDER BY x.seq) + 1)::int AS rn, x.available_at <= now() AS ready
        FROM {{schema}}.events x
        WHERE x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
          AND x.seq > h.seq AND x.published_at IS NULL AND x.dead_at IS NULL
          AND (x.aggregate_type = ANY($5::text[]) OR NOT EXISTS (
              SELECT 1 FROM {{schema}}.events d
              WHERE d.aggregate_type = x.aggregate_type AND d.aggregate_id = x.aggregate_id
                AND d.seq < x.seq AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL))
        ORDER BY x.seq
        LIMIT $4 - 1
    ) f
)
SELECT e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
       e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
       coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
       e.attempts, pk.rn, pk.ready
FROM picked pk
JOIN {{schema}}.events e ON e.seq = pk.seq
WHERE e.published_at IS NULL AND e.dead_at IS NULL
ORDER BY pk.rn, e.seq
FOR UPDATE OF e SKIP LOCKED
