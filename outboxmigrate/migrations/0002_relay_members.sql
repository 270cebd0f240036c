-- 0002_relay_members: relay instances announce themselves, so partitions are shared fairly.
-- {{schema}} is replaced by the quoted schema name before this runs.

CREATE TABLE {{schema}}.relay_members (
    -- random per process start
    owner        text PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
