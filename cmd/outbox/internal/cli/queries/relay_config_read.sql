-- relay_config_read: the recorded mode and partition count (no row before a relay ran).
SELECT mode, partitions FROM {{schema}}.relay_config
