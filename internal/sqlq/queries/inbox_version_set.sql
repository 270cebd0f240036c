-- inbox_version_set: moves the aggregate's last applied version forward, only from the
-- value read under the lock (inbox_version_lock): a version row can never go backwards,
-- and an update that finds another value (which the lock makes impossible) changes
-- nothing and is reported. $1 consumer, $2 aggregate type, $3 aggregate id, $4 the
-- version read, $5 the new version (> $4).
UPDATE {{schema}}.inbox_versions SET last_version = $5, updated_at = now()
WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND last_version = $4 AND $5 > $4
