-- claim_ordered: claim the next batch in ordered mode and mark it published (or delete
-- it) in the same statement, inside the relay's claim transaction.
--
-- $1: the relay partitions this relay leases (int[]; null: all), $6: how many relay
-- partitions there are (an event partition p is in relay partition p * $6 / 4096: a few
-- integer operations per row, where a list of event partitions cost a search of up to
-- 4096 entries per walked row);
-- $2: max heads; $3: max events per aggregate;
-- $4: aggregate types whose dead events do not hold their aggregate (text[]);
-- $5: max events in the batch (heads first, then every aggregate's second event, and so
-- on: the cut is fair, and the relay's memory stays bounded however large $2 × $3);
-- $7: delete the claimed rows (retention: delete on publish) instead of marking them.
--
-- A row may be published only when it is its aggregate's head: no earlier pending row of
-- the aggregate exists, and no earlier dead row still holds it. Heads are found by walking
-- events_pending in seq order (oldest first), probing events_pending_aggregate and
-- events_held per row; the walk stops after $2 heads, so a blocked aggregate's rows cost
-- one probe each and never starve the others. Every probe is a correlated subquery or a
-- LATERAL primary-key lookup, so the plan stays index-driven without statistics (an
-- ANALYZE on an empty table once turned joins here into nested loops over the backlog).
-- The walk has no low-water mark: a row that commits late with a lower seq is simply
-- found on the next claim.
--
-- Each head brings up to $3-1 followers of its aggregate (pipelining within an aggregate).
-- Only the contiguous prefix (rn = 1, 2, …) of each aggregate's rows that this statement
-- locked and that are available is claimed: a row skipped by SKIP LOCKED or not yet
-- available ends its aggregate's share of the batch.
--
-- Claimed rows are marked published (attempt counted) or deleted before the sink has
-- them, as in claim_unordered.sql: the transaction stays open while the relay publishes,
-- a crash or a rollback undoes the mark, and what the sink did not take is put back by
-- unclaim_keep.sql or unclaim_delete.sql before the commit (ADR 0004). Columns: as
-- claim_unordered.sql's.
WITH heads AS MATERIALIZED (
    SELECT h.seq, h.ctid, h.aggregate_type, h.aggregate_id
    FROM {{schema}}.events h
    WHERE h.published_at IS NULL AND h.dead_at IS NULL
      AND h.available_at <= now()
      AND ($1::int[] IS NULL OR h.partition * $6::int / 4096 = ANY($1::int[]))
      -- head: the first pending row of its aggregate. ORDER BY the index's own key makes
      -- this one probe of events_pending_aggregate per row whatever the statistics say
      -- (a min() let the planner walk events_pending instead after ANALYZE on a drained
      -- table: 2 s per claim for 1,000 pending rows).
      AND h.seq = (
          SELECT p.seq FROM {{schema}}.events p
          WHERE p.aggregate_type = h.aggregate_type AND p.aggregate_id = h.aggregate_id
            AND p.published_at IS NULL AND p.dead_at IS NULL
          ORDER BY p.aggregate_type, p.aggregate_id, p.seq
          LIMIT 1)
      -- not held by an earlier dead event (one probe of events_held)
      AND (h.aggregate_type = ANY($4::text[]) OR (
          SELECT d.seq FROM {{schema}}.events d
          WHERE d.aggregate_type = h.aggregate_type AND d.aggregate_id = h.aggregate_id
            AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq < h.seq
          LIMIT 1) IS NULL)
    ORDER BY h.seq
    LIMIT $2
), picked AS MATERIALIZED (
    SELECT * FROM (
        SELECT seq, ctid, seq AS head, 1 AS rn, true AS ready FROM heads
        UNION ALL
        SELECT f.seq, f.ctid, h.seq, f.rn, f.ready
        FROM heads h
        CROSS JOIN LATERAL (
            SELECT x.seq, x.ctid, (row_number() OVER (ORDER BY x.seq) + 1)::int AS rn, x.available_at <= now() AS ready
            FROM {{schema}}.events x
            WHERE x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
              AND x.seq > h.seq AND x.published_at IS NULL AND x.dead_at IS NULL
              AND (x.aggregate_type = ANY($4::text[]) OR (
                  SELECT d.seq FROM {{schema}}.events d
                  WHERE d.aggregate_type = x.aggregate_type AND d.aggregate_id = x.aggregate_id
                    AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq < x.seq
                  LIMIT 1) IS NULL)
            ORDER BY x.seq
            -- no deeper than the cut can reach: each aggregate gets at most
            -- ceil($5 / heads) events, so the walk of followers stays near $5 rows
            LIMIT least($3, ceil($5::numeric / (SELECT count(*) FROM heads))::int) - 1
        ) f
    ) levels
    ORDER BY rn, seq
    LIMIT $5
),
-- Lock each picked row where the walk found it: by ctid, a TID scan, where a primary-key
-- lookup cost an index descent per row (and another for the mark): the claim ran 15%
-- faster. A row changed by someone else since the walk's snapshot is at another ctid by
-- the time it is locked: the recheck of the locked version fails and it is left out (a
-- gap), as is a row no longer pending (the predicate is repeated on the locked row). No
-- tuple moves while the statement runs (only VACUUM FULL or CLUSTER move tuples, and their
-- lock conflicts with this statement's).
locked AS MATERIALIZED (
    SELECT pk.ctid, pk.head, pk.rn, pk.ready AND l.ctid IS NOT NULL AS ok
    FROM picked pk
    LEFT JOIN LATERAL (
        SELECT x.ctid FROM {{schema}}.events x
        WHERE x.ctid = pk.ctid AND x.published_at IS NULL AND x.dead_at IS NULL
        FOR UPDATE SKIP LOCKED
    ) l ON true
), claimed AS MATERIALIZED (
    -- per aggregate, the rows before its first gap
    SELECT ctid FROM (
        SELECT ctid, ok, bool_and(ok) OVER (PARTITION BY head ORDER BY rn) AS before_gap FROM locked
    ) w
    WHERE before_gap
), deleted AS (
    DELETE FROM {{schema}}.events e
    -- = ANY(ARRAY(…)): a TID scan of the locked rows whatever the plan (claim_unordered.sql)
    WHERE $7::boolean AND e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
    RETURNING e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0) AS aggregate_version, e.event_type,
              e.schema_version, coalesce(e.topic, '') AS topic, e.headers, e.content_type,
              coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes) AS payload, e.trace_parent, e.created_at,
              e.attempts, e.available_at, e.last_error, e.payload IS NOT NULL AS payload_is_json
), marked AS (
    UPDATE {{schema}}.events e
    SET published_at = now(), attempts = e.attempts + 1
    WHERE NOT $7::boolean AND e.ctid = ANY(ARRAY(SELECT ctid FROM claimed))
    RETURNING e.seq, e.id, e.aggregate_type, e.aggregate_id, coalesce(e.aggregate_version, 0), e.event_type,
              e.schema_version, coalesce(e.topic, ''), e.headers, e.content_type,
              coalesce(convert_to(e.payload::text, 'UTF8'), e.payload_bytes), e.trace_parent, e.created_at,
              e.attempts - 1, e.available_at, e.last_error, e.payload IS NOT NULL
)
SELECT * FROM deleted
UNION ALL
SELECT * FROM marked
