-- claim_ordered_pick: the rows an ordered claim takes, as the CTE claimed (their ctids),
-- locked. Not a statement: claim_ordered.sql (mark the rows published),
-- claim_ordered_delete.sql (delete them) and poison_candidates_ordered.sql (list them)
-- include it and finish it, so the marking or
-- deleting statement is the top-level one and its rows go straight to the relay (as a
-- CTE, RETURNING went through a tuplestore: a quarter of a delete-on-publish claim).
--
-- $1: the relay partitions this relay leases (int[]; null: all), $6: how many relay
-- partitions there are (an event partition p is in relay partition p * $6 / 4096: a few
-- integer operations per row, where a list of event partitions cost a search of up to
-- 4096 entries per walked row);
-- $2: max heads (at most $5); $3: max events per aggregate;
-- $4: aggregate types whose dead events do not hold their aggregate (text[]);
-- $5: max events in the batch: each head brings at most $5 / heads events of its
-- aggregate, so the cut is fair, and the relay's memory stays bounded however large
-- $2 × $3;
-- $7: 0 to find the heads by walking (below); n > 0 to discover them by a loose index
-- scan of at most n aggregates instead (the relay's choice: relay/heads.go).
--
-- A row may be published only when it is its aggregate's head: no earlier pending row of
-- the aggregate exists, and no earlier dead row still holds it. Heads are found by walking
-- events_pending in seq order (oldest first), probing events_pending_aggregate and
-- events_held per row; the walk stops after $2 heads, so a blocked aggregate's rows cost
-- one probe each and never starve the others. With few aggregates, each with a backlog,
-- the walk never finds $2 heads and covers the whole backlog; discovery ($7 > 0) then
-- finds the same heads for one index descent per aggregate. Every probe is a correlated
-- subquery or a LATERAL primary-key lookup, so the plan stays index-driven without
-- statistics (an ANALYZE on an empty table once turned joins here into nested loops over
-- the backlog).
-- The walk has no low-water mark: a row that commits late with a lower seq is simply
-- found on the next claim.
--
-- Each head brings up to $3-1 followers of its aggregate (pipelining within an aggregate).
-- Only the contiguous prefix (in seq order) of each aggregate's rows that this statement
-- locked and that are available is claimed: a row skipped by SKIP LOCKED or not yet
-- available ends its aggregate's share of the batch.
WITH RECURSIVE aggregates AS (
    -- discovery ($7 > 0): the head (first pending row) of every aggregate with a pending
    -- row, one index descent each (a loose index scan of events_pending_aggregate: the
    -- first entry past an aggregate's key is the next aggregate's head), so the cost
    -- follows the number of aggregates, not the backlog; read lazily, no further than the
    -- first $7 aggregates
    (SELECT p.seq, p.ctid, p.aggregate_type, p.aggregate_id, p.partition, p.available_at FROM {{schema}}.events p
     WHERE p.published_at IS NULL AND p.dead_at IS NULL
     ORDER BY p.aggregate_type, p.aggregate_id, p.seq
     LIMIT 1)
    UNION ALL
    SELECT n.*
    FROM aggregates a
    CROSS JOIN LATERAL (
        SELECT p.seq, p.ctid, p.aggregate_type, p.aggregate_id, p.partition, p.available_at FROM {{schema}}.events p
        WHERE p.published_at IS NULL AND p.dead_at IS NULL
          AND (p.aggregate_type, p.aggregate_id) > (a.aggregate_type, a.aggregate_id)
        ORDER BY p.aggregate_type, p.aggregate_id, p.seq
        LIMIT 1) n
), heads AS MATERIALIZED (
SELECT c.*,
    -- the first later dead event that holds the aggregate, if any: its followers stop
    -- there (one probe of events_held per head, not one per follower)
    CASE WHEN NOT c.aggregate_type = ANY(coalesce($4::text[], '{}')) THEN (
        SELECT d.seq FROM {{schema}}.events d
        WHERE d.aggregate_type = c.aggregate_type AND d.aggregate_id = c.aggregate_id
          AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq > c.seq
        ORDER BY d.aggregate_type, d.aggregate_id, d.seq
        LIMIT 1) END AS hold
FROM (
  (SELECT h.seq, h.ctid, h.aggregate_type, h.aggregate_id
    FROM {{schema}}.events h
    WHERE h.published_at IS NULL AND h.dead_at IS NULL
      AND h.available_at <= now()
      AND ($1::int[] IS NULL OR h.partition * $6::int / 4096 = ANY($1::int[]))
      -- head: the first pending row of its aggregate: one probe of
      -- events_pending_aggregate per row. events_pending cannot serve it (its predicate
      -- adds available_at IS NOT NULL, which this probe does not state; migration 0003):
      -- after ANALYZE on a drained table the planner took it for empty and walked it
      -- for every head, 2 s per claim for 1,000 pending rows.
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
      AND $7::int = 0
    ORDER BY h.seq
    LIMIT $2)
  UNION ALL
  (SELECT h.seq, h.ctid, h.aggregate_type, h.aggregate_id
    -- the first $7 claimable aggregates in key order, however many cannot be claimed
    -- now (held, backing off, scheduled, another relay's) come before them: the cap
    -- counts only claimable ones, so such aggregates cost one descent each and never
    -- starve a claimable one (read lazily: the recursion stops at the $7th)
    FROM (SELECT * FROM aggregates a
          WHERE a.available_at <= now()
            AND ($1::int[] IS NULL OR a.partition * $6::int / 4096 = ANY($1::int[]))
            -- not held by an earlier dead event (one probe of events_held)
            AND (a.aggregate_type = ANY($4::text[]) OR (
                SELECT d.seq FROM {{schema}}.events d
                WHERE d.aggregate_type = a.aggregate_type AND d.aggregate_id = a.aggregate_id
                  AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq < a.seq
                LIMIT 1) IS NULL)
          LIMIT $7) h
    WHERE $7::int > 0
    ORDER BY h.seq
    LIMIT $2)
) c
), picked AS MATERIALIZED (
    SELECT seq, ctid, seq AS head, true AS ready FROM heads
    UNION ALL
    SELECT f.seq, f.ctid, h.seq, f.ready
    FROM heads h
    CROSS JOIN LATERAL (
        SELECT x.seq, x.ctid, x.available_at <= now() AS ready
        FROM {{schema}}.events x
        WHERE x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
          AND x.seq > h.seq AND x.published_at IS NULL AND x.dead_at IS NULL
          AND (h.hold IS NULL OR x.seq < h.hold) -- not past a dead event that holds them
        ORDER BY x.seq
        -- the cut: each aggregate gets at most $5 / heads events (and at most $3), so
        -- the batch holds at most $5 without a sort to cut it
        LIMIT least($3::int, $5::int / (SELECT count(*) FROM heads)) - 1
    ) f
),
-- Lock each picked row where the walk found it: by ctid, a TID scan, where a primary-key
-- lookup cost an index descent per row (and another for the mark): the claim ran 15%
-- faster. A row changed by someone else since the walk's snapshot is at another ctid by
-- the time it is locked: the recheck of the locked version fails and it is left out (a
-- gap), as is a row no longer pending (the predicate is repeated on the locked row). No
-- tuple moves while the statement runs (only VACUUM FULL or CLUSTER move tuples, and their
-- lock conflicts with this statement's). The planner may instead scan
-- events_pending_aggregate with a ctid filter (it does when it takes the pending rows for
-- few); that stays within the pending rows. Written so that no partial index could serve
-- it, the generic plan made while the table was small became a sequential scan of the
-- whole table (p99 at 2,000 events/s: 24 → 91 ms).
locked AS MATERIALIZED (
    SELECT x.ctid FROM {{schema}}.events x
    WHERE x.ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE ready))
      AND x.published_at IS NULL AND x.dead_at IS NULL
    FOR UPDATE SKIP LOCKED
), whole AS MATERIALIZED (
    -- whether every picked row was locked where the walk found it, compared by identity,
    -- not by count: before PostgreSQL's "missing EPQ recheck for TID Scan" fix (minor
    -- releases of late 2025), a head updated and committed after this statement's
    -- snapshot could be locked at its new version, at another ctid, while still pending;
    -- the counts matched, the mark below could not see that version, and the head's
    -- followers went out before it. Sorting a batch's ctids twice costs little beside
    -- the claim (and nothing when the batch is empty).
    SELECT (SELECT array_agg(ctid ORDER BY ctid) FROM locked)
           IS NOT DISTINCT FROM (SELECT array_agg(ctid ORDER BY ctid) FROM picked) AS ok
), claimed AS MATERIALIZED (
    -- every picked row locked: all of them (the common case: no join)
    SELECT ctid FROM locked
    WHERE (SELECT ok FROM whole)
    UNION ALL
    -- else, per aggregate, the rows before its first gap: a picked row whose own ctid
    -- was not locked is a gap
    SELECT ctid FROM (
        SELECT pk.ctid, bool_and(l.ctid IS NOT NULL) OVER (PARTITION BY pk.head ORDER BY pk.seq) AS before_gap
        FROM picked pk
        LEFT JOIN locked l ON l.ctid = pk.ctid
    ) w
    WHERE before_gap AND NOT (SELECT ok FROM whole)
)
