-- demo_kill_relay: the demo's relay kill: terminates every backend of the relay whose
-- pool set application_name @application_name (its transactions in flight roll back, its session
-- state is gone), and returns how many there were.
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = @application_name
