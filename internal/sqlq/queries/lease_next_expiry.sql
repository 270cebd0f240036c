-- lease_next_expiry: milliseconds until the next lease of a relay other than @owner
-- expires (null: none).
SELECT ceil(extract(epoch FROM min(expires_at) - now()) * 1000)::bigint
FROM {{schema}}.leases
WHERE owner IS DISTINCT FROM @owner AND expires_at > now()
