-- 0007_replays_filter: an audit row of a set-based replay or discard (outboxadmin) records
-- the filter the operator chose, beside the ids it matched, so the audit log answers
-- "which events, and why those" (docs/adr/0020-admin-set-based-operations.md). NULL for
-- actions that named their events by id (relay.Replay, relay.Discard).
-- {{schema}} is replaced by the quoted schema name before this runs.
ALTER TABLE {{schema}}.replays ADD COLUMN filter jsonb;
