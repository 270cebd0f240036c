-- fence: in ordered mode, before a batch commits, count how many of the leases it was
-- claimed under ($2 relay partitions, $3 their epochs) relay $1 still holds at those
-- epochs. The lease rows stay locked FOR SHARE until the commit, so a relay taking a
-- lease over (which bumps its epoch) skips it (lease_acquire.sql) until this batch has
-- committed: a count short of $2's length means a lease moved on, and the relay rolls
-- the batch back, so a paused relay's late marks never overwrite the new owner's.
SELECT count(*) FROM (
    SELECT FROM {{schema}}.leases l
    JOIN unnest($2::int[], $3::bigint[]) AS m(partition, epoch) ON m.partition = l.partition AND m.epoch = l.epoch
    WHERE l.owner = $1
    FOR SHARE OF l
) held
