-- notify_trigger_uninstall: remove the opt-in wake-up trigger and its function
-- (relay.UninstallNotifyTrigger). Idempotent; serialised with installs by the same
-- advisory lock as notify_trigger_install.
SELECT pg_advisory_xact_lock(1869968750, 0);

DROP TRIGGER IF EXISTS events_notify_wakeup ON {{schema}}.events;

DROP FUNCTION IF EXISTS {{schema}}.events_notify_wakeup();
