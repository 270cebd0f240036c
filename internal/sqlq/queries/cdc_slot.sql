-- cdc_slot: the state of a change-data-capture source's replication slot (cdc/slot.go),
-- by name (@slot): whether it exists and is logical on this database, the pid of the
-- reader that holds it (null: none), its wal_status (reserved, extended, unreserved,
-- lost), the WAL it retains (the server's position minus restart_lsn) and what it has
-- not confirmed (minus confirmed_flush_lsn), in bytes. No row: there is no such slot.
SELECT s.slot_type = 'logical' AND s.database = current_database() AND s.plugin = 'pgoutput',
       s.active_pid, coalesce(s.wal_status, ''),
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint
FROM pg_replication_slots s
WHERE s.slot_name = @slot
