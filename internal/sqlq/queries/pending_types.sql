-- pending_types: the CTE types, the aggregate types with a pending row in type order, by
-- a loose index scan of events_pending_aggregate (one descent a type, whatever each
-- type's backlog). Not a statement: claim_ordered_pick.sql and probe.sql include it in
-- their WITH lists, after a CTE types_wanted of one boolean row (yes: whether to read the
-- types at all; when not, the scan reads nothing).
types AS (
    (SELECT p.aggregate_type FROM {{schema}}.events p
     WHERE (SELECT yes FROM types_wanted) AND p.published_at IS NULL AND p.dead_at IS NULL
     ORDER BY p.aggregate_type, p.aggregate_id, p.seq
     LIMIT 1)
    UNION ALL
    SELECT n.aggregate_type
    FROM types t
    CROSS JOIN LATERAL (
        SELECT p.aggregate_type FROM {{schema}}.events p
        WHERE p.published_at IS NULL AND p.dead_at IS NULL AND p.aggregate_type > t.aggregate_type
        ORDER BY p.aggregate_type, p.aggregate_id, p.seq
        LIMIT 1) n
),
