-- select_ids: the events a replay or discard would change, in write order: those named
-- by id (@ids), by aggregate (@aggregate_type, @aggregate_id; null: none), or by event
-- type (@event_type; null: none) written at or after @since. @replay: true for a replay
-- (dead, not discarded: from events_held), false for a discard (not published and not
-- discarded: pending from events_pending, or dead from events_held).
SELECT id FROM (
    SELECT id, seq FROM {{schema}}.events
    WHERE dead_at IS NOT NULL AND discarded_at IS NULL
      AND (id = ANY(@ids::uuid[]) OR (aggregate_type = @aggregate_type AND aggregate_id = @aggregate_id)
           OR (event_type = @event_type AND created_at >= @since::timestamptz))
    UNION
    SELECT id, seq FROM {{schema}}.events
    WHERE NOT @replay::bool AND published_at IS NULL AND dead_at IS NULL
      AND (id = ANY(@ids::uuid[]) OR (aggregate_type = @aggregate_type AND aggregate_id = @aggregate_id)
           OR (event_type = @event_type AND created_at >= @since::timestamptz))
) AS m
ORDER BY seq
