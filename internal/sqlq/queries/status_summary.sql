-- status_summary: the backlog and the dead letters, each from its partial index
-- (events_pending, events_held), so the cost follows the backlog and the dead letters,
-- never the published rows a retention window keeps.
SELECT
    (SELECT count(*) FROM {{schema}}.events WHERE published_at IS NULL AND dead_at IS NULL) AS pending,
    (SELECT created_at FROM {{schema}}.events WHERE published_at IS NULL AND dead_at IS NULL
      ORDER BY seq LIMIT 1) AS oldest_pending,
    (SELECT count(*) FROM {{schema}}.events WHERE dead_at IS NOT NULL AND discarded_at IS NULL) AS dead,
    (SELECT count(*) FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM {{schema}}.events
      WHERE dead_at IS NOT NULL AND discarded_at IS NULL) AS held) AS blocked_aggregates,
    now() AS now
