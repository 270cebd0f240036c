-- inbox_version_set: moves the aggregate's last applied version forward, only from the
-- value read under the lock (inbox_version_lock): a version row can never go backwards,
-- and an update that finds another value (which the lock makes impossible) changes
-- nothing and is reported. @read is the version read, @new_last the new one (> @read).
UPDATE {{schema}}.inbox_versions SET last_version = @new_last, updated_at = now()
WHERE consumer = @consumer AND aggregate_type = @aggregate_type AND aggregate_id = @aggregate_id
    AND last_version = @read AND @new_last > @read
