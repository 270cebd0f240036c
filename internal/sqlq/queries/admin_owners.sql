-- admin_owners: the relays of the schema: every live member (relay_members) and every
-- owner of an unexpired lease, with the relay partitions it holds.
SELECT o.owner, coalesce(array_agg(l.partition ORDER BY l.partition) FILTER (WHERE l.partition IS NOT NULL), '{}'),
       m.started_at, m.heartbeat_at
FROM (
    SELECT owner FROM {{schema}}.relay_members WHERE expires_at > now()
    UNION
    SELECT owner FROM {{schema}}.leases WHERE owner IS NOT NULL AND expires_at > now()
) o
LEFT JOIN {{schema}}.leases l ON l.owner = o.owner AND l.expires_at > now()
LEFT JOIN {{schema}}.relay_members m ON m.owner = o.owner
GROUP BY o.owner, m.started_at, m.heartbeat_at
ORDER BY o.owner
