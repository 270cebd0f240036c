-- notify_trigger_install: the opt-in wake-up trigger (relay.InstallNotifyTrigger).
-- After every INSERT statement on events it notifies the schema's wake-up channel,
-- 'outbox_wakeup_' || schema cut to 63 bytes (outbox.WakeupChannel), so relays wake
-- within milliseconds even for writers that do not use outbox.Notifier.
--
-- The cost falls on writers: the NOTIFY is queued inside their transaction, and every
-- committing transaction that issued NOTIFY waits for one global lock, serialising
-- those commits. It is FOR EACH STATEMENT, and PostgreSQL folds identical
-- notifications of one transaction into one, so each transaction sends one at most.
--
-- Run as one simple-protocol query (an implicit transaction). The transaction-scoped
-- advisory lock (class 'outn') serialises concurrent installs, which would otherwise
-- fail with "tuple concurrently updated". CREATE OR REPLACE TRIGGER: PostgreSQL 14+.
SELECT pg_advisory_xact_lock(1869968750, 0);

CREATE OR REPLACE FUNCTION {{schema}}.events_notify_wakeup() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(left('outbox_wakeup_' || TG_TABLE_SCHEMA, 63), '');
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER events_notify_wakeup
    AFTER INSERT ON {{schema}}.events
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.events_notify_wakeup();
