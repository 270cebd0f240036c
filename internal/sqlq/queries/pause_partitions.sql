-- pause_partitions: how many relay partitions a partition pause may name: the relays'
-- recorded count (relay_config), or @default_partitions before any relay started.
SELECT coalesce((SELECT partitions FROM {{schema}}.relay_config), @default_partitions::int)
