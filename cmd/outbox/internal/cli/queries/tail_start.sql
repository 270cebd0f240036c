-- tail_start: the highest seq now (0 for an empty table), from the primary key.
SELECT coalesce(max(seq), 0) FROM {{schema}}.events
