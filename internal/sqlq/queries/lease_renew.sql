-- lease_renew: extend the leases this relay ($1) still holds at the epochs it knows
-- ($2 partitions, $3 epochs) by $4 ms. Returns the partitions renewed; a partition not
-- returned was taken over (its epoch moved on) and is lost.
UPDATE {{schema}}.leases l
SET expires_at = now() + $4 * interval '1 millisecond', renewed_at = now()
FROM unnest($2::int[], $3::bigint[]) AS m(partition, epoch)
WHERE l.partition = m.partition AND l.epoch = m.epoch AND l.owner = $1
RETURNING l.partition
