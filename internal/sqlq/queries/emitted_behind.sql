-- emitted_behind: of the events a CDC reader decoded from the WAL in table-less mode
-- (outbox.Writer.Emit; one element of @aggregate_types/@aggregate_ids per event, in commit
-- order), the ones that may not be published now but go to the events table, as rows
-- behind what is there: their index in the arrays (0-based). Bound by name to
-- behindParams in relay/emitted.go.
--
-- An event goes to the table when it is paused (the active pauses, as claim_floor.sql
-- reads them: everything, its relay partition, its aggregate type) or, in ordered mode
-- (@ordered), when its aggregate has a row in the table that comes first: a pending one
-- (retrying, scheduled, or not yet claimed) or a dead one that holds the aggregate (unless
-- its type is in @publish_past_dead). One probe of events_pending_aggregate and one of
-- events_held per distinct aggregate.
WITH paused AS MATERIALIZED (
    SELECT coalesce(bool_or(ps.scope = 'all'), false) AS everything,
           coalesce(array_agg(ps.partition) FILTER (WHERE ps.scope = 'partition'), '{}') AS parts,
           coalesce((SELECT c.partitions FROM {{schema}}.relay_config c), 1) AS n,
           coalesce(array_agg(ps.aggregate_type) FILTER (WHERE ps.scope = 'aggregate_type'), '{}') AS types
    FROM {{schema}}.pauses ps
    WHERE ps.resumed_at IS NULL
), input AS (
    SELECT t, i, (ord - 1)::int AS ord
    FROM unnest(@aggregate_types::text[], @aggregate_ids::text[]) WITH ORDINALITY AS m(t, i, ord)
), aggregates AS (
    SELECT DISTINCT t, i FROM input
), occupied AS MATERIALIZED (
    SELECT a.t, a.i FROM aggregates a
    WHERE @ordered::bool AND (
        EXISTS (SELECT 1 FROM {{schema}}.events e
                WHERE e.aggregate_type = a.t AND e.aggregate_id = a.i
                  AND e.published_at IS NULL AND e.dead_at IS NULL)
        OR (NOT a.t = ANY(coalesce(@publish_past_dead::text[], '{}'))
            AND EXISTS (SELECT 1 FROM {{schema}}.events e
                        WHERE e.aggregate_type = a.t AND e.aggregate_id = a.i
                          AND e.dead_at IS NOT NULL AND e.discarded_at IS NULL)))
)
-- a join to occupied, not an EXISTS per event: that plan was estimated at millions (a CTE
-- scan per event), which had PostgreSQL JIT-compile the statement — 0.4–0.6 s a call
SELECT m.ord FROM input m
CROSS JOIN paused p
LEFT JOIN occupied o ON o.t = m.t AND o.i = m.i
WHERE p.everything
   OR m.t = ANY(p.types)
   OR ((hashtext(m.t || chr(31) || m.i) & 4095) * p.n / 4096) = ANY(p.parts)
   OR o.t IS NOT NULL
ORDER BY m.ord
