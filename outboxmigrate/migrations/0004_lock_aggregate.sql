-- 0004_lock_aggregate: the aggregate lock as a function, for writers that insert events
-- with their own SQL (another language, sqlc, a trigger). Enqueue takes this lock on
-- each aggregate it writes, in the same statement as the INSERT (sorted by key, so two
-- transactions cannot deadlock on it within one statement): while a transaction holds
-- it, another writer of the aggregate waits, so seq order is commit order and the relay
-- publishes in it. A raw-SQL writer keeps that order by calling
--
--     SELECT outbox.lock_aggregate('order', '42');
--
-- in its transaction before its INSERT into outbox.events (and, writing several
-- aggregates, in one consistent order). The key — class 1869968760, the hash of
-- aggregate_type || E'\x1f' || aggregate_id — must stay the one the enqueue statements
-- inline (a function call there cost writers measurably).
-- {{schema}} is replaced by the quoted schema name before this runs.
CREATE FUNCTION {{schema}}.lock_aggregate(aggregate_type text, aggregate_id text)
RETURNS void
LANGUAGE sql VOLATILE STRICT
RETURN pg_advisory_xact_lock(1869968760, hashtext(aggregate_type || chr(31) || aggregate_id));
