-- lease_release: give back leases ($2 partitions) held by relay $1, so another relay can
-- take them at once, and wake the other relays. With $3, also leave the membership.
WITH released AS (
    UPDATE {{schema}}.leases
    SET owner = NULL, expires_at = '-infinity'
    WHERE owner = $1 AND partition = ANY($2::int[])
    RETURNING partition
), leave AS (
    DELETE FROM {{schema}}.relay_members WHERE $3::boolean AND owner = $1
)
SELECT count(*), pg_notify($4, 'lease') FROM released
