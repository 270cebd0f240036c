-- fence: in ordered mode, in the round trip that commits a batch, check that relay
-- @owner still holds every lease the batch was claimed under (@partitions, the relay
-- partitions, and @epochs, their epochs; relay/lease.go's fenceParams). The lease rows
-- stay locked FOR SHARE until the commit, so a relay taking a lease over (which bumps its
-- epoch) skips it (lease_acquire.sql) until this batch has committed. When a lease moved
-- on, the statement divides by zero on purpose: the error stops the COMMIT queued after
-- it, and the relay rolls the batch back, so a paused relay's late marks never overwrite
-- the new owner's.
SELECT 1 / (count(*) = cardinality(@partitions::int[]))::int FROM (
    SELECT FROM {{schema}}.leases l
    JOIN unnest(@partitions::int[], @epochs::bigint[]) AS m(partition, epoch) ON m.partition = l.partition AND m.epoch = l.epoch
    WHERE l.owner = @owner
    FOR SHARE OF l
) held
