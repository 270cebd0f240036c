-- pause_columns: the columns of a pause, as relay.scanPause reads them. Not a statement:
-- pause.sql, resume.sql and pauses.sql include it.
id, scope, partition, aggregate_type, paused_by, reason, paused_at, resumed_by, resume_reason, resumed_at
