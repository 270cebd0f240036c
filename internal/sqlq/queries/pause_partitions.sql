-- pause_partitions: how many relay partitions a partition pause may name: the relays'
-- recorded count (relay_config), or $1 (the default) before any relay started.
SELECT coalesce((SELECT partitions FROM {{schema}}.relay_config), $1::int)
