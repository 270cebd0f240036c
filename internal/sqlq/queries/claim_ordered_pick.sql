-- claim_ordered_pick: the rows an ordered claim takes, as the CTE picked, which
-- claim_ordered_lock.sql locks (as claimed). Not a statement: claim_ordered.sql (mark
-- the rows published), claim_ordered_delete.sql (delete them) and
-- poison_candidates_ordered.sql (list them) include it after claim_floor.sql, then
-- claim_ordered_lock.sql, and finish it, so the marking or deleting statement
-- is the top-level one and its rows go straight to the relay (as a CTE, RETURNING went
-- through a tuplestore: a quarter of a delete-on-publish claim).
--
-- Parameters, by name (relay/claim.go's orderedClaim binds them):
--   @floor, @replays: claim_floor.sql's (the floor, the last replay known);
--   @scope: the relay partitions this relay leases (int[]; null: all);
--   @partitions: how many relay partitions there are (an event partition p is in relay
--     partition p * @partitions / 4096: a few integer operations per row, where a list
--     of event partitions cost a search of up to 4096 entries per checked row);
--   @heads: max heads (at most @max_events); @max_per_aggregate: max events per aggregate;
--   @publish_past_dead: aggregate types whose dead events do not hold their aggregate
--     (text[]);
--   @max_events: max events in the batch: each head brings at most @max_events / heads
--     events of its aggregate, so the cut is fair, and the relay's memory stays bounded
--     however large @heads × @max_per_aggregate;
--   @cursor_types, @cursor_ids: where the last claim stopped in each aggregate type
--     (text[] of types, text[] of aggregate ids; a type not named starts at its first
--     aggregate): the rotation's cursors, kept by the relay (relay/heads.go);
--   @limit_types, @limits: the most heads of each of these types the claim takes
--     (text[], int[]; a type not named gets the equal share): the relay sets them from
--     its last claim (relay/heads.go), giving a type the share another left unused, in
--     proportion to Config.TypeWeights;
--   @cap_types, @caps: the most heads of each of these types the claim may take, whatever
--     its limit or share (text[], int[]; a type not named has no cap): what their rates
--     leave them (Config.TypeRates, relay/typerates.go);
--   @only_types, @skip_types: the aggregate types the claim may take (text[]; null: every
--     type) and those it leaves out (text[]; null: none): a relay's lanes
--     (Config.IsolatedTypes, ADR 0039), and the types whose rates have nothing left for
--     now (Config.TypeRates, ADR 0040); a type left out is not read at all.
--
-- A row may be published only when it is its aggregate's head: the first pending row of
-- the aggregate, not held by an earlier dead row. When at most 64 rows are pending from
-- the floor (512 for a claim scoped to some of the partitions, ADR 0038), the heads are
-- found among them (near, few and the second branch of heads below;
-- docs/adr/0010-claim-floor.md). Else heads are found by discovery, never
-- by walking the backlog: a loose index scan of events_pending_aggregate, whose first
-- entry past an aggregate's key is the next aggregate's head, costs one index descent
-- per aggregate however deep its backlog. Heads are shared fairly:
--   - across aggregate types: each type with a pending row gets an equal share of the
--     @heads heads (at least one), or the limit the relay gives it, so a type flooding the
--     table cannot hold a quiet one back; shares_full names the types that filled theirs;
--   - within a type, by rotation: its aggregates are read in key order from where the
--     last claim stopped (then from the first, round the end), so every aggregate gets
--     its turn however many there are, and a hot aggregate takes one head at a time.
-- Only aggregates that can be claimed now (available, in scope, not held) count against
-- a share; the others cost one descent each and are passed over, so no number of held,
-- backing-off, scheduled or other relays' aggregates starves a claimable one. Every
-- probe is a correlated subquery or a LATERAL index lookup, so the plan stays
-- index-driven without statistics (an ANALYZE on an empty table once turned joins here
-- into nested loops over the backlog).
--
-- Each head brings up to @max_per_aggregate-1 followers of its aggregate (pipelining within an aggregate).
-- Only the contiguous prefix (in seq order) of each aggregate's rows that this statement
-- locked and that are available is claimed: a row skipped by SKIP LOCKED or not yet
-- available ends its aggregate's share of the batch.
held_any AS MATERIALIZED (
    -- whether any dead event holds an aggregate at all (one descent of events_held): when
    -- none does — the common case — no head is probed for one before it or after it
    SELECT EXISTS (SELECT 1 FROM {{schema}}.events d WHERE d.dead_at IS NOT NULL AND d.discarded_at IS NULL) AS yes
), near AS MATERIALIZED (
    -- the pending rows from the lowest one claim_floor.sql found (from its bound), in
    -- seq order, up to one more than a small claim's worth (a scoped claim's: a few
    -- hundred, every relay's rows among them): a walk of events_pending that reads
    -- neither the dead entries below the bound nor those that part walked
    SELECT p.seq, p.ctid, p.aggregate_type, p.aggregate_id, p.partition, p.available_at
    FROM {{schema}}.events p
    WHERE p.published_at IS NULL AND p.dead_at IS NULL AND p.available_at IS NOT NULL
      AND p.seq >= (SELECT min_pending FROM seen)
    ORDER BY p.seq
    LIMIT CASE WHEN @scope::int[] IS NULL THEN 65 ELSE 513 END
), few AS MATERIALIZED (
    -- near holds every pending row: the heads are found among them (small, below), not
    -- by discovery in events_pending_aggregate, whose drained rows' dead entries lie
    -- between the live aggregates where no bound can skip them
    SELECT count(*) <= CASE WHEN @scope::int[] IS NULL THEN 64 ELSE 512 END AS ok FROM near
), types_wanted AS MATERIALIZED (
    -- the aggregate types with a pending row (types) are read unless few
    SELECT NOT ok AS yes FROM few
),
{{include pending_types}}
share AS MATERIALIZED (
    SELECT greatest(1, @heads::int / greatest(CASE WHEN (SELECT ok FROM few)
        THEN (SELECT count(DISTINCT n.aggregate_type) FROM near n WHERE NOT n.aggregate_type = ANY((SELECT types FROM paused)::text[])
            AND (@only_types::text[] IS NULL OR n.aggregate_type = ANY(@only_types::text[])) AND NOT n.aggregate_type = ANY(coalesce(@skip_types::text[], '{}')))
        ELSE (SELECT count(*) FROM types t WHERE NOT t.aggregate_type = ANY((SELECT types FROM paused)::text[])
            AND (@only_types::text[] IS NULL OR t.aggregate_type = ANY(@only_types::text[])) AND NOT t.aggregate_type = ANY(coalesce(@skip_types::text[], '{}'))) END, 1)) AS heads
), limits AS MATERIALIZED (
    -- the types the relay gives a limit of their own (their share of @heads as it sees
    -- it); the others get share's
    SELECT l.t, l.n FROM unnest(@limit_types::text[], @limits::int[]) AS l(t, n)
), caps AS MATERIALIZED (
    -- the types whose rate caps their heads (least() passes over a null: no cap)
    SELECT c.t, c.n FROM unnest(@cap_types::text[], @caps::int[]) AS c(t, n)
), candidates AS MATERIALIZED (
  -- each type's claimable heads, in the rotation's order (turn), up to one more than its
  -- limit (lim): the one more says whether the type had more than its share
  SELECT h.seq, h.ctid, h.aggregate_type, h.aggregate_id, h.turn, lim.n AS lim
  FROM types ty
  CROSS JOIN LATERAL (
    SELECT least(coalesce((SELECT l.n FROM limits l WHERE l.t = ty.aggregate_type), (SELECT heads FROM share)),
        (SELECT c.n FROM caps c WHERE c.t = ty.aggregate_type)) AS n) lim
  CROSS JOIN LATERAL (
    -- row_number() over the rotation as it streams: no sort, and the rotation is still
    -- read no further than the limit
    SELECT a.*, row_number() OVER () AS turn FROM (
      -- this type's aggregates, each by its head, in key order from the type's cursor
      -- (exclusive) to the end, then from the first up to the cursor (wrapped); read
      -- lazily, no further than the share of claimable ones
      WITH RECURSIVE rotation AS (
        (SELECT r.* FROM (
            (SELECT p.seq, p.ctid, p.aggregate_type, p.aggregate_id, p.partition, p.available_at, false AS wrapped
             FROM {{schema}}.events p
             WHERE p.published_at IS NULL AND p.dead_at IS NULL AND p.aggregate_type = ty.aggregate_type
               AND p.aggregate_id > coalesce((SELECT c.id FROM unnest(@cursor_types::text[], @cursor_ids::text[]) AS c(t, id) WHERE c.t = ty.aggregate_type), '')
             ORDER BY p.aggregate_type, p.aggregate_id, p.seq
             LIMIT 1)
            UNION ALL
            (SELECT p.seq, p.ctid, p.aggregate_type, p.aggregate_id, p.partition, p.available_at, true
             FROM {{schema}}.events p
             WHERE p.published_at IS NULL AND p.dead_at IS NULL AND p.aggregate_type = ty.aggregate_type
             ORDER BY p.aggregate_type, p.aggregate_id, p.seq
             LIMIT 1)) r
         LIMIT 1)
        UNION ALL
        SELECT n.*
        FROM rotation w
        CROSS JOIN LATERAL (
          SELECT x.* FROM (
            (SELECT p.seq, p.ctid, p.aggregate_type, p.aggregate_id, p.partition, p.available_at, w.wrapped
             FROM {{schema}}.events p
             -- the type and the id as two conditions: a row comparison beside an equality on
             -- the type began the index scan at the type's first entry (1 ms a step at
             -- 10,000 aggregates, without statistics)
             WHERE p.published_at IS NULL AND p.dead_at IS NULL
               AND p.aggregate_type = w.aggregate_type AND p.aggregate_id > w.aggregate_id
             ORDER BY p.aggregate_type, p.aggregate_id, p.seq
             LIMIT 1)
            UNION ALL
            (SELECT p.seq, p.ctid, p.aggregate_type, p.aggregate_id, p.partition, p.available_at, true
             FROM {{schema}}.events p
             WHERE NOT w.wrapped AND p.published_at IS NULL AND p.dead_at IS NULL AND p.aggregate_type = w.aggregate_type
             ORDER BY p.aggregate_type, p.aggregate_id, p.seq
             LIMIT 1)) x
          LIMIT 1) n
        -- once wrapped, stop at the cursor: every aggregate of the type has been read
        WHERE NOT (n.wrapped AND n.aggregate_id > coalesce((SELECT c.id FROM unnest(@cursor_types::text[], @cursor_ids::text[]) AS c(t, id) WHERE c.t = ty.aggregate_type), ''))
      )
      SELECT * FROM rotation
    ) a
    WHERE a.available_at <= now()
      AND (@scope::int[] IS NULL OR a.partition * @partitions::int / 4096 = ANY(@scope::int[]))
      AND NOT a.partition * (SELECT n FROM paused) / 4096 = ANY((SELECT parts FROM paused)::int[])
      -- not held by an earlier dead event (one probe of events_held)
      AND (NOT (SELECT yes FROM held_any) OR a.aggregate_type = ANY(@publish_past_dead::text[]) OR (
          SELECT d.seq FROM {{schema}}.events d
          WHERE d.aggregate_type = a.aggregate_type AND d.aggregate_id = a.aggregate_id
            AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq < a.seq
          LIMIT 1) IS NULL)
    LIMIT lim.n + 1
  ) h
  -- a paused type is not read at all, nor a type of another lane, nor anything when
  -- everything is paused
  WHERE NOT ty.aggregate_type = ANY((SELECT types FROM paused)::text[]) AND NOT (SELECT everything FROM paused)
    AND (@only_types::text[] IS NULL OR ty.aggregate_type = ANY(@only_types::text[]))
    AND NOT ty.aggregate_type = ANY(coalesce(@skip_types::text[], '{}'))
  UNION ALL
  -- few: the same heads from near, which holds every pending row: each aggregate's
  -- first row there, in the rotation's order per type (after the cursor, then wrapped),
  -- claimable ones only, a share per type
  SELECT s.seq, s.ctid, s.aggregate_type, s.aggregate_id, s.turn, s.lim FROM (
    SELECT a.*, row_number() OVER (PARTITION BY a.aggregate_type ORDER BY a.wrapped, a.aggregate_id) AS turn,
        least(coalesce((SELECT l.n FROM limits l WHERE l.t = a.aggregate_type), (SELECT heads FROM share)),
            (SELECT c.n FROM caps c WHERE c.t = a.aggregate_type)) AS lim
    FROM (
      SELECT DISTINCT ON (n.aggregate_type, n.aggregate_id) n.*,
          n.aggregate_id <= coalesce((SELECT c.id FROM unnest(@cursor_types::text[], @cursor_ids::text[]) AS c(t, id) WHERE c.t = n.aggregate_type), '') AS wrapped
      FROM near n
      WHERE (SELECT ok FROM few)
      ORDER BY n.aggregate_type, n.aggregate_id, n.seq
    ) a
    WHERE a.available_at <= now()
      AND (@scope::int[] IS NULL OR a.partition * @partitions::int / 4096 = ANY(@scope::int[]))
      -- not paused (claim_floor.sql)
      AND NOT (SELECT everything FROM paused)
      AND NOT a.aggregate_type = ANY((SELECT types FROM paused)::text[])
      AND NOT a.partition * (SELECT n FROM paused) / 4096 = ANY((SELECT parts FROM paused)::int[])
      -- in this claim's lane
      AND (@only_types::text[] IS NULL OR a.aggregate_type = ANY(@only_types::text[]))
      AND NOT a.aggregate_type = ANY(coalesce(@skip_types::text[], '{}'))
      AND (NOT (SELECT yes FROM held_any) OR a.aggregate_type = ANY(@publish_past_dead::text[]) OR (
          SELECT d.seq FROM {{schema}}.events d
          WHERE d.aggregate_type = a.aggregate_type AND d.aggregate_id = a.aggregate_id
            AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq < a.seq
          LIMIT 1) IS NULL)
      -- the head of its aggregate below the bound too: no pending row of the aggregate
      -- before it (a descent of events_pending_aggregate, then past the aggregate's own
      -- drained rows). Only a row made pending out of band is ever there (the floor's
      -- assumptions, docs/adr/0010-claim-floor.md); order comes first: the aggregate
      -- waits for the claim that reads from the first row. A correlated subquery, not NOT
      -- EXISTS: that became an anti-join reading the whole index once per head.
      AND (SELECT b.seq FROM {{schema}}.events b
           WHERE b.aggregate_type = a.aggregate_type AND b.aggregate_id = a.aggregate_id
             AND b.published_at IS NULL AND b.dead_at IS NULL AND b.seq < a.seq
           LIMIT 1) IS NULL
  ) s
  WHERE s.turn <= s.lim + 1
), heads AS MATERIALIZED (
SELECT c.*,
    -- the first later dead event that holds the aggregate, if any: its followers stop
    -- there (one probe of events_held per head, not one per follower)
    CASE WHEN (SELECT yes FROM held_any) AND NOT c.aggregate_type = ANY(coalesce(@publish_past_dead::text[], '{}')) THEN (
        SELECT d.seq FROM {{schema}}.events d
        WHERE d.aggregate_type = c.aggregate_type AND d.aggregate_id = c.aggregate_id
          AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL AND d.seq > c.seq
        ORDER BY d.aggregate_type, d.aggregate_id, d.seq
        LIMIT 1) END AS hold
-- each type's candidates up to its limit: all of them when they are @heads or fewer (the
-- common case: no sort); else cut at @heads turn by turn (each type's first in its
-- rotation, then each one's second, …), not oldest first: when the limits add up to more
-- than @heads, a type whose heads are all newer than the others' (a trickle beside a
-- backlog) still gets its turn, and what a type keeps is where its rotation starts (so the
-- cursor, moved to the last it claimed, passes over none it cut)
FROM (SELECT u.seq, u.ctid, u.aggregate_type, u.aggregate_id FROM candidates u
      WHERE u.turn <= u.lim AND (SELECT count(*) FROM candidates v WHERE v.turn <= v.lim) <= @heads
      UNION ALL
      (SELECT u.seq, u.ctid, u.aggregate_type, u.aggregate_id FROM candidates u
       WHERE u.turn <= u.lim AND (SELECT count(*) FROM candidates v WHERE v.turn <= v.lim) > @heads
       ORDER BY u.turn, u.seq
       LIMIT @heads)) c
), shares_full AS MATERIALIZED (
    -- the types that had more claimable heads than their limit: the claim did not take
    -- all there was (the relay claims again at once, and gives them the share other types
    -- left: relay/heads.go)
    SELECT coalesce(array_agg(u.aggregate_type), '{}') AS types FROM candidates u WHERE u.turn = u.lim + 1
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
        -- the cut: each aggregate gets at most @max_events / heads events (and at most @max_per_aggregate), so
        -- the batch holds at most @max_events without a sort to cut it
        LIMIT least(@max_per_aggregate::int, @max_events::int / (SELECT count(*) FROM heads)) - 1
    ) f
),
