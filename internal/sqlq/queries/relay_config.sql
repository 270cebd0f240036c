-- relay_config: record this relay's settings (@mode, @partitions) if none are recorded,
-- and return what is recorded, so a relay with different settings can refuse to start.
WITH ins AS (
    INSERT INTO {{schema}}.relay_config (mode, partitions) VALUES (@mode, @partitions)
    ON CONFLICT (singleton) DO NOTHING
    RETURNING mode, partitions
)
SELECT mode, partitions FROM ins
UNION ALL
SELECT mode, partitions FROM {{schema}}.relay_config WHERE NOT EXISTS (SELECT 1 FROM ins)
