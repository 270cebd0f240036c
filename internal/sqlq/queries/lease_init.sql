-- lease_init: make sure a lease row exists for each relay partition 0..@partitions-1.
INSERT INTO {{schema}}.leases (partition)
SELECT p FROM generate_series(0, @partitions::int - 1) AS p
ON CONFLICT (partition) DO NOTHING
