-- probe: is any event ready to publish in these relay partitions (@scope int[]; null:
-- all; @partitions the number of relay partitions, as in claim_ordered_pick.sql)? @floor,
-- @replays: claim_floor.sql's (relay/batch.go's probeParams binds them by name).
-- An idle relay asks this one cheap question (a walk of events_pending from the lowest
-- pending row claim_floor.sql found) instead of opening a claim transaction; a true
-- answer is followed by a claim. After the answer, claim_seen.sql's columns: an idle
-- relay's floor moves on too.
{{include claim_floor}}
ready AS MATERIALIZED (
    SELECT EXISTS (
        SELECT 1 FROM {{schema}}.events
        WHERE published_at IS NULL AND dead_at IS NULL AND available_at <= now()
          AND seq >= (SELECT min_pending FROM seen)
          AND (@scope::int[] IS NULL OR partition * @partitions::int / 4096 = ANY(@scope::int[]))
          -- not paused: a relay whose every row is paused stays idle
          AND NOT (SELECT everything FROM paused)
          AND NOT aggregate_type = ANY((SELECT types FROM paused)::text[])
          AND NOT partition * (SELECT n FROM paused) / 4096 = ANY((SELECT parts FROM paused)::int[])) AS ready
)
SELECT (SELECT ready FROM ready), {{include claim_seen}}
