-- enqueue_conflicts: after Enqueue's ON CONFLICT DO NOTHING skipped rows, tell which of
-- the skipped ids already exist (a duplicate id); the others lost on aggregate version.
-- @ids is a JSON array of id strings (driver-agnostic, like enqueue), bound by name to
-- conflictsParams in enqueue_params.go.
SELECT id::text
FROM {{schema}}.events
WHERE id IN (SELECT value::uuid FROM json_array_elements_text(@ids::json))
