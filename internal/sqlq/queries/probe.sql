-- probe: is any event ready to publish in these relay partitions (@scope int[]; null:
-- all; @partitions the number of relay partitions, as in claim_ordered_pick.sql), of the
-- lane's aggregate types (@only_types, @skip_types, as in claim_ordered_pick.sql)? @floor,
-- @replays: claim_floor.sql's (relay/batch.go's probeParams binds them by name).
-- An idle relay asks this one cheap question (a walk of events_pending from the lowest
-- pending row claim_floor.sql found) instead of opening a claim transaction; a true
-- answer is followed by a claim. Then, when @backlog asks, whether it is a backlog: more
-- than 64 rows ready in scope among the first 256 ready ones, nothing paused (an ordered
-- relay that is not busy runs all its workers from this claim on: ADR 0035). After
-- those, claim_seen.sql's columns: an idle relay's floor moves on too.
{{include claim_floor}}
types_wanted AS MATERIALIZED (
    -- a lane's types are every type but @skip_types: read the types with a pending row
    SELECT @only_types::text[] IS NULL AND @skip_types::text[] IS NOT NULL AS yes
),
{{include pending_types}}
ready AS MATERIALIZED (
    SELECT CASE
        -- no aggregate type or partition paused, no lane: the first due row in scope answers
        WHEN cardinality((SELECT types FROM paused)) = 0 AND cardinality((SELECT parts FROM paused)) = 0
            AND @only_types::text[] IS NULL AND @skip_types::text[] IS NULL THEN EXISTS (
            SELECT 1 FROM {{schema}}.events
            WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now()
              AND seq >= (SELECT min_pending FROM seen)
              AND (@scope::int[] IS NULL OR partition * @partitions::int / 4096 = ANY(@scope::int[]))
              AND NOT (SELECT everything FROM paused))
        -- a lane, nothing paused: for each of the lane's types (@only_types, or every type
        -- with a pending row but @skip_types), its first due row in scope
        -- among its first 1,000 pending rows (in events_pending_aggregate), or 1,000 read:
        -- there may be more. The other lane's rows are never read, however many (a flood
        -- of them made the probe of the bounded walk below read 1,000 rows at every
        -- wake-up, and answer yes).
        WHEN cardinality((SELECT types FROM paused)) = 0 AND cardinality((SELECT parts FROM paused)) = 0
            AND NOT (SELECT everything FROM paused) THEN EXISTS (
            SELECT 1
            FROM (SELECT t FROM unnest(@only_types::text[]) AS t
                  UNION ALL
                  SELECT aggregate_type FROM types) ty(t)
            CROSS JOIN LATERAL (
                SELECT 1 FROM (
                    SELECT e.available_at <= now() AND (@scope::int[] IS NULL OR e.partition * @partitions::int / 4096 = ANY(@scope::int[])) AS due,
                        row_number() OVER () AS n
                    FROM {{schema}}.events e
                    WHERE e.published_at IS NULL AND e.dead_at IS NULL AND e.aggregate_type = ty.t
                    -- the index's order: an index scan, never a scan of the table
                    ORDER BY e.aggregate_type, e.aggregate_id, e.seq
                    LIMIT 1000) r
                WHERE r.due OR r.n = 1000
                LIMIT 1) x
            WHERE NOT ty.t = ANY(coalesce(@skip_types::text[], '{}')))
        -- a type or a partition paused: their rows are not in the index's order,
        -- so read at most 1,000 due rows; none unpaused in the lane among them, but 1,000
        -- read: there may be more, and the claim (which skips a paused type or one of
        -- another lane without reading it) decides.
        -- Without this cap an idle relay re-read the whole paused backlog every poll.
        ELSE (SELECT coalesce(bool_or((@scope::int[] IS NULL OR r.partition * @partitions::int / 4096 = ANY(@scope::int[]))
                                     AND NOT r.aggregate_type = ANY((SELECT types FROM paused)::text[])
                                     AND (@only_types::text[] IS NULL OR r.aggregate_type = ANY(@only_types::text[]))
                                     AND NOT r.aggregate_type = ANY(coalesce(@skip_types::text[], '{}'))
                                     AND NOT r.partition * (SELECT n FROM paused) / 4096 = ANY((SELECT parts FROM paused)::int[])), false)
                     OR count(*) = 1000
              FROM (SELECT e.partition, e.aggregate_type FROM {{schema}}.events e
                    WHERE e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at <= now()
                      AND e.seq >= (SELECT min_pending FROM seen)
                    ORDER BY e.seq
                    LIMIT 1000) r
              WHERE NOT (SELECT everything FROM paused))
    END AS ready
), backlog AS MATERIALIZED (
    -- asked for (@backlog) and nothing paused: more than 64 of the first 256 ready rows
    -- from the floor are in scope and in the lane (a bounded read: past it, false)
    SELECT count(*) FILTER (WHERE (@scope::int[] IS NULL OR b.partition * @partitions::int / 4096 = ANY(@scope::int[]))
        AND (@only_types::text[] IS NULL OR b.aggregate_type = ANY(@only_types::text[]))
        AND NOT b.aggregate_type = ANY(coalesce(@skip_types::text[], '{}'))) > 64 AS yes
    FROM (SELECT e.partition, e.aggregate_type FROM {{schema}}.events e
          WHERE @backlog::boolean AND (SELECT ready FROM ready)
            AND cardinality((SELECT types FROM paused)) = 0 AND cardinality((SELECT parts FROM paused)) = 0
            AND e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at <= now()
            AND e.seq >= (SELECT min_pending FROM seen)
          ORDER BY e.seq
          LIMIT 256) b
)
SELECT (SELECT ready FROM ready), (SELECT yes FROM backlog), {{include claim_seen}}
