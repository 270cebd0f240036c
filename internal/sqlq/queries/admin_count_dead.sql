-- admin_count_dead: how many dead letters (dead, not discarded) match the admin filter
-- (see admin_filter): the count the dashboard's bulk forms confirm. A read (the
-- API's dry run runs the change itself and rolls it back, which leaves dead tuples: fine
-- for an operator's action, not for every page view). Walks events_held.
SELECT count(*) FROM {{schema}}.events e
WHERE e.dead_at IS NOT NULL AND e.discarded_at IS NULL AND {{include admin_filter}}
