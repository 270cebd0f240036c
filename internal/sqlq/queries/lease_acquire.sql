-- lease_acquire: take up to @need free or expired leases for relay @owner for @ttl_ms
-- ms (relay/lease.go's acquireParams), bumping each one's epoch (the fencing token).
-- Expiry is judged by the database's clock. A lease row locked by a relay that is
-- recording a batch (FOR SHARE) is skipped, not waited for. Returns partition, new
-- epoch, and whether the previous owner's lease had expired rather than been released
-- (a rescue after a crash or a pause).
WITH free AS (
    SELECT partition, owner IS NOT NULL AS rescued
    FROM {{schema}}.leases
    WHERE owner IS NULL OR expires_at < now()
    ORDER BY partition
    LIMIT @need
    FOR UPDATE SKIP LOCKED
)
UPDATE {{schema}}.leases l
SET owner = @owner, epoch = l.epoch + 1, acquired_at = now(), renewed_at = now(),
    expires_at = now() + @ttl_ms * interval '1 millisecond'
FROM free f
WHERE l.partition = f.partition
RETURNING l.partition, l.epoch, f.rescued
