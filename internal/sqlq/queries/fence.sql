-- fence: in ordered mode, in the round trip that commits a batch, check that relay $1
-- still holds every lease the batch was claimed under ($2 relay partitions, $3 their
-- epochs). The lease rows stay locked FOR SHARE until the commit, so a relay taking a
-- lease over (which bumps its epoch) skips it (lease_acquire.sql) until this batch has
-- committed. When a lease moved on, the statement divides by zero on purpose: the error
-- stops the COMMIT queued after it, and the relay rolls the batch back, so a paused
-- relay's late marks never overwrite the new owner's.
SELECT 1 / (count(*) = cardinality($2::int[]))::int FROM (
    SELECT FROM {{schema}}.leases l
    JOIN unnest($2::int[], $3::bigint[]) AS m(partition, epoch) ON m.partition = l.partition AND m.epoch = l.epoch
    WHERE l.owner = $1
    FOR SHARE OF l
) held
