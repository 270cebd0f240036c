-- admin_by_partition: pending and dead counts per relay partition (event partition p is in
-- relay partition p * partitions / 4096, as the claims compute it; relay_config's count,
-- or @default_partitions before any relay started), with the lease's owner, epoch and expiry. Every relay
-- partition is listed, also an empty one. The counts read the partial indexes' rows only.
-- A lease row never taken, or released, expires at '-infinity': no expiry (NULL), which
-- a Go time.Time cannot hold.
WITH cfg AS (
    SELECT coalesce((SELECT partitions FROM {{schema}}.relay_config), @default_partitions::int) AS n
), counts AS (
    SELECT partition * (SELECT n FROM cfg) / 4096 AS rp, sum(pending)::bigint AS pending, sum(dead)::bigint AS dead
    FROM (
        SELECT partition, count(*) AS pending, 0 AS dead FROM {{schema}}.events
        WHERE published_at IS NULL AND dead_at IS NULL AND available_at IS NOT NULL GROUP BY partition
        UNION ALL
        SELECT partition, 0, count(*) FROM {{schema}}.events
        WHERE dead_at IS NOT NULL AND discarded_at IS NULL GROUP BY partition
    ) t
    GROUP BY 1
)
SELECT g.rp, coalesce(c.pending, 0), coalesce(c.dead, 0),
       coalesce(l.owner, ''), coalesce(l.epoch, 0), l.expires_at > now(),
       CASE WHEN isfinite(l.expires_at) THEN l.expires_at END
FROM generate_series(0, (SELECT n FROM cfg) - 1) AS g(rp)
LEFT JOIN counts c ON c.rp = g.rp
LEFT JOIN {{schema}}.leases l ON l.partition = g.rp
ORDER BY g.rp
