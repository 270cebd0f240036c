-- 0009_relay_members_state: each relay reports its sink's state and its counters with
-- every heartbeat (lease_beat.sql), so operators see every process's breaker from the
-- database (outboxadmin's overview, the relays' API) — state that otherwise lives only
-- in the relay's memory and its own /metrics.
-- {{schema}} is replaced by the quoted schema name before this runs.
ALTER TABLE {{schema}}.relay_members
    -- until when the relay's breaker keeps it off its sink; NULL: closed (the sink is up)
    ADD COLUMN breaker_open_until timestamptz,
    -- the relay's counters since it started, as of its last heartbeat
    ADD COLUMN published bigint NOT NULL DEFAULT 0,
    ADD COLUMN dead bigint NOT NULL DEFAULT 0,
    ADD COLUMN breaker_opens bigint NOT NULL DEFAULT 0;
