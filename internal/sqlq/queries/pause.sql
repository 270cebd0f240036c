-- pause: pause the relaying of a scope (0008_pauses.sql): record who and why, unless the
-- scope is paused already. Returns the scope's active pause, and whether this statement
-- made it; no row when another transaction paused the same scope meanwhile (its row is
-- not in this statement's snapshot: ask again).
WITH made AS (
    INSERT INTO {{schema}}.pauses (scope, partition, aggregate_type, paused_by, reason)
    VALUES (@scope::text, @partition::int, @aggregate_type::text, @actor::text, @reason::text)
    ON CONFLICT (scope, coalesce(partition, -1), coalesce(aggregate_type, '')) WHERE resumed_at IS NULL
    DO NOTHING
    RETURNING {{include pause_columns}}, true AS made
)
SELECT * FROM made
UNION ALL
SELECT {{include pause_columns}}, false FROM {{schema}}.pauses
WHERE resumed_at IS NULL AND scope = @scope::text
  AND coalesce(partition, -1) = coalesce(@partition::int, -1)
  AND coalesce(aggregate_type, '') = coalesce(@aggregate_type::text, '')
  AND NOT EXISTS (SELECT FROM made)
