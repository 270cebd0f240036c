-- purge_lock: one purger at a time per schema: a transaction-scoped advisory lock
-- (class 'outp') on the hash of the @schema name, so a pooled connection never keeps it
-- by accident.
SELECT pg_try_advisory_xact_lock(1869968752, hashtext(@schema))
