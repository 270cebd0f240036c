-- inbox_version_lock: locks the (consumer, aggregate)'s version row and returns its last
-- applied version, creating the row with @initial when there is none. DO UPDATE (a no-op
-- update) rather than a SELECT … FOR UPDATE after an INSERT … DO NOTHING: one round trip,
-- and under READ COMMITTED it waits for a concurrent holder of the row and then returns
-- the row as that one committed it, so the decision is always made on the latest
-- version, under the lock, until this transaction ends. @initial is the last version of
-- an aggregate never seen (0, or the event's version - 1 with FirstVersionAny).
INSERT INTO {{schema}}.inbox_versions AS v (consumer, aggregate_type, aggregate_id, last_version)
VALUES (@consumer, @aggregate_type, @aggregate_id, @initial)
ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE SET last_version = v.last_version
RETURNING last_version
