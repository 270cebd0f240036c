-- claim_seqs_ordered_pick: the rows an ordered by-seq claim takes, as the CTE picked,
-- which claim_ordered_lock.sql locks. Not a statement: claim_seqs_ordered.sql and
-- claim_seqs_ordered_delete.sql include it after claim_floor.sql, then
-- claim_ordered_lock.sql, and finish it.
--
-- Parameters, by name (relay/seqs.go's orderedSeqClaim binds them): @floor, @replays
-- (claim_floor.sql's); @seqs (bigint[]): the seqs a change-data-capture source read from
-- the WAL; @scope, @partitions, @max_per_aggregate, @publish_past_dead:
-- claim_ordered_pick.sql's.
--
-- Of the named rows, those still pending, in scope and not paused are candidates (a
-- primary-key lookup each, no walk). Per aggregate, its first candidate is taken only
-- when it is the aggregate's head: no pending row of the aggregate before it, and no
-- dead row holding it (unless its type publishes past dead events). The candidates after
-- it follow, up to @max_per_aggregate, while no pending row the seqs do not name and no
-- holding dead row lies between: such a row (an earlier transaction's, left to the
-- polling claims) ends the aggregate's share, so nothing goes out before it ("not a
-- candidate" is a hashed lookup in cands — the same as not named, since every pending
-- row of an aggregate with a candidate passes the scope and pause filters — where a test
-- against @seqs read the whole array for each entry between). Every probe
-- is a correlated LIMIT 1 subquery on events_pending_aggregate or events_held (few
-- entries each), as in claim_ordered_pick.sql. A row left out stays pending for the
-- polling claims (docs/adr/0026-cdc-discovers-the-table-keeps-the-state.md).
cands AS MATERIALIZED (
    SELECT x.seq, x.ctid, x.aggregate_type, x.aggregate_id, x.available_at <= now() AS ready,
           row_number() OVER w AS turn, first_value(x.seq) OVER w AS head,
           x.aggregate_type = ANY(coalesce(@publish_past_dead::text[], '{}')) AS past_dead
    FROM {{schema}}.events x
    WHERE x.seq = ANY(@seqs::bigint[])
      AND x.published_at IS NULL AND x.dead_at IS NULL
      AND (@scope::int[] IS NULL OR x.partition * @partitions::int / 4096 = ANY(@scope::int[]))
      -- not paused (claim_floor.sql)
      AND NOT (SELECT everything FROM paused)
      AND NOT x.aggregate_type = ANY((SELECT types FROM paused)::text[])
      AND NOT x.partition * (SELECT n FROM paused) / 4096 = ANY((SELECT parts FROM paused)::int[])
    WINDOW w AS (PARTITION BY x.aggregate_type, x.aggregate_id ORDER BY x.seq)
), heads AS MATERIALIZED (
    -- each candidate, with whether its aggregate's first candidate is the aggregate's
    -- head, probed once per aggregate (on that first candidate) and spread over the
    -- aggregate's candidates by a window, not a join: the planner, which cannot estimate
    -- a CTE's rows, joined candidates to heads by nested loops (9,000 × 1,000 rows took
    -- 2.2 s of a 2.4 s claim)
    SELECT c.*, bool_or(CASE WHEN c.turn = 1 THEN
               (SELECT b.seq FROM {{schema}}.events b
                WHERE b.aggregate_type = c.aggregate_type AND b.aggregate_id = c.aggregate_id
                  AND b.published_at IS NULL AND b.dead_at IS NULL AND b.seq < c.seq
                LIMIT 1) IS NULL
               AND (c.past_dead OR (
                   SELECT d.seq FROM {{schema}}.events d
                   WHERE d.aggregate_type = c.aggregate_type AND d.aggregate_id = c.aggregate_id
                     AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq < c.seq
                   LIMIT 1) IS NULL)
           ELSE false END) OVER (PARTITION BY c.aggregate_type, c.aggregate_id) AS at_head
    FROM cands c
), picked AS MATERIALIZED (
    SELECT c.seq, c.ctid, c.head, c.ready
    FROM heads c
    WHERE c.at_head AND c.turn <= @max_per_aggregate::int
      AND (c.turn = 1 OR (
          (SELECT g.seq FROM {{schema}}.events g
           WHERE g.aggregate_type = c.aggregate_type AND g.aggregate_id = c.aggregate_id
             AND g.published_at IS NULL AND g.dead_at IS NULL
             AND g.seq > c.head AND g.seq < c.seq AND g.seq NOT IN (SELECT cc.seq FROM cands cc)
           LIMIT 1) IS NULL
          AND (c.past_dead OR (
              SELECT d.seq FROM {{schema}}.events d
              WHERE d.aggregate_type = c.aggregate_type AND d.aggregate_id = c.aggregate_id
                AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq > c.head AND d.seq < c.seq
              LIMIT 1) IS NULL)))
),
