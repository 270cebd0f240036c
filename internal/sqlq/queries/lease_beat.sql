-- lease_beat: announce this relay ($1, alive for $2 ms) and count the live relays.
-- Members gone for an hour are forgotten.
WITH beat AS (
    INSERT INTO {{schema}}.relay_members (owner, expires_at)
    VALUES ($1, now() + $2 * interval '1 millisecond')
    ON CONFLICT (owner) DO UPDATE SET heartbeat_at = now(), expires_at = excluded.expires_at
    RETURNING owner
), forget AS (
    DELETE FROM {{schema}}.relay_members WHERE expires_at < now() - interval '1 hour'
)
SELECT 1 + count(*) FROM {{schema}}.relay_members WHERE expires_at > now() AND owner <> $1
