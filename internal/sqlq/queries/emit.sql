-- emit: write a batch of events into the WAL only (table-less mode): one transactional
-- logical decoding message whose prefix names the schema (@prefix, outbox:<schema>) and
-- whose content is the events as one JSON array of rows (@rows, the shape enqueue.sql
-- reads). It is decoded at its transaction's commit, in commit order, by the schema's CDC
-- reader (package cdc), and never if the transaction rolls back. No row is written.
--
-- A message no slot reads is lost: PostgreSQL writes it whatever wal_level is, and a slot
-- created later starts after it. So the message is written only while the reader's slot
-- (@slot) exists in this database and has not lost its WAL; otherwise the statement writes
-- nothing and returns '' (not an error: the caller's transaction stays usable), and the
-- Writer refuses. A look at the shared memory behind pg_replication_slots, no table.
-- Bound by name to emitParams in emit.go.
SELECT coalesce((
    SELECT pg_logical_emit_message(true, @prefix::text, @rows::text)::text
    WHERE EXISTS (
        SELECT 1 FROM pg_catalog.pg_replication_slots
        WHERE slot_name = @slot::text AND database = current_database()
          AND wal_status IS DISTINCT FROM 'lost')
), '')
