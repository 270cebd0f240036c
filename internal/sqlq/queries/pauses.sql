-- pauses: the pauses of the schema (0008_pauses.sql), newest first: the active ones only
-- ($1 true), or every one, resumed too, up to $2 rows.
SELECT {{include pause_columns}} FROM {{schema}}.pauses
WHERE resumed_at IS NULL OR NOT $1::bool
ORDER BY id DESC
LIMIT $2
