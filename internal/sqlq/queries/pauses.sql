-- pauses: the pauses of the schema (0008_pauses.sql), newest first: the active ones only
-- (@active_only), or every one, resumed too, up to @limit rows.
SELECT {{include pause_columns}} FROM {{schema}}.pauses
WHERE resumed_at IS NULL OR NOT @active_only::bool
ORDER BY id DESC
LIMIT @limit
