-- status_partitions: per relay partition (an event partition p is in relay partition
-- p * partitions / 4096, as the claim computes it), the pending events and the lease.
-- @partitions: the relay partition count (relay_config's). Only partitions with a backlog or a
-- lease are listed.
WITH backlog AS (
    SELECT partition::int * @partitions::int / 4096 AS relay_partition, count(*) AS pending, min(created_at) AS oldest
    FROM {{schema}}.events WHERE published_at IS NULL AND dead_at IS NULL
    GROUP BY 1
)
SELECT coalesce(b.relay_partition, l.partition) AS relay_partition, coalesce(b.pending, 0) AS pending, b.oldest,
       CASE WHEN l.expires_at > now() THEN l.owner END AS owner,
       CASE WHEN l.expires_at > now() THEN l.expires_at END AS expires_at
FROM backlog b
FULL JOIN (SELECT * FROM {{schema}}.leases WHERE partition < @partitions::int) l ON l.partition = b.relay_partition
WHERE b.pending > 0 OR l.expires_at > now()
ORDER BY 1
