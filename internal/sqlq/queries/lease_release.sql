-- lease_release: give back leases (@partitions) held by relay @owner, so another relay
-- can take them at once, and wake the other relays on @channel. With @leave, also leave
-- the membership (relay/lease.go's releaseParams).
WITH released AS (
    UPDATE {{schema}}.leases
    SET owner = NULL, expires_at = '-infinity'
    WHERE owner = @owner AND partition = ANY(@partitions::int[])
    RETURNING partition
), leave AS (
    DELETE FROM {{schema}}.relay_members WHERE @leave::boolean AND owner = @owner
)
SELECT count(*), pg_notify(@channel, 'lease') FROM released
