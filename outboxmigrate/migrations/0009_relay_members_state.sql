-- 0009_relay_members_state: each relay reports its sink's state and its counters with
-- every heartbeat (lease_beat.sql), so operators see every process's breaker from the
-- database (outboxadmin's overview, the relays' API) — state that otherwise lives only
-- in the relay's memory and its own /metrics.
-- {{schema}} is replaced by the quoted schema name before this runs.
ALTER TABLE {{schema}}.relay_members
    -- not NULL while the relay's breaker is open (its sink was found down and no probe
    -- has succeeded since): until when it waits before its next probe, which may be past
    -- while a probe is due or under way; NULL: closed (the sink is up)
    ADD COLUMN breaker_open_until timestamptz,
    -- the relay's counters since it started, as of its last heartbeat
    ADD COLUMN published bigint NOT NULL DEFAULT 0,
    ADD COLUMN dead bigint NOT NULL DEFAULT 0,
    ADD COLUMN breaker_opens bigint NOT NULL DEFAULT 0;
