-- resume: end the active pause of a scope (0008_pauses.sql), recording who and why; the
-- row stays, as the pause's audit. Returns the pause resumed; no row when the scope is
-- not paused. The caller then wakes the relays (notify.sql): an idle relay would
-- otherwise wait for its poll.
UPDATE {{schema}}.pauses
SET resumed_at = now(), resumed_by = @actor::text, resume_reason = @reason::text
WHERE resumed_at IS NULL AND scope = @scope::text
  AND coalesce(partition, -1) = coalesce(@partition::int, -1)
  AND coalesce(aggregate_type, '') = coalesce(@aggregate_type::text, '')
RETURNING {{include pause_columns}}
