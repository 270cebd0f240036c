-- admin_owners: the relays of the schema: every live member (relay_members) and every
-- owner of an unexpired lease, with the relay partitions it holds, and the state its last
-- heartbeat reported (0009_relay_members_state.sql): its breaker open (not null: until
-- when it waits before its next probe, which may be past while a probe is under way) or
-- closed (null), its published and dead counts and breaker openings since it started.
SELECT o.owner, coalesce(array_agg(l.partition ORDER BY l.partition) FILTER (WHERE l.partition IS NOT NULL), '{}'),
       m.started_at, m.heartbeat_at,
       m.breaker_open_until,
       coalesce(m.published, 0), coalesce(m.dead, 0), coalesce(m.breaker_opens, 0)
FROM (
    SELECT owner FROM {{schema}}.relay_members WHERE expires_at > now()
    UNION
    SELECT owner FROM {{schema}}.leases WHERE owner IS NOT NULL AND expires_at > now()
) o
LEFT JOIN {{schema}}.leases l ON l.owner = o.owner AND l.expires_at > now()
LEFT JOIN {{schema}}.relay_members m ON m.owner = o.owner
GROUP BY o.owner, m.started_at, m.heartbeat_at, m.breaker_open_until, m.published, m.dead, m.breaker_opens
ORDER BY o.owner
