-- admin_status: the backlog at a glance. Each count walks one partial index (events_pending:
-- pending rows; events_held: dead rows not discarded), so its cost follows the backlog and
-- the dead letters, not the table. The oldest pending row is the first of events_pending in
-- seq order (seq order is commit order for writers that take the aggregate lock). written
-- counts the rows after seq @after (the previous sample's max_seq; 0 on the first sample, which
-- counts nothing rather than the whole table): a primary-key range, for the handler's
-- throughput estimate. Retention: the events table's and its indexes' sizes,
-- the planner's row estimates (pg_class.reltuples: no count of the retained rows, which
-- would read them all) of events and events_archive, and the creation time of the lowest
-- seq still in the table (how far back retention has kept rows; a primary-key probe).
SELECT
    (SELECT count(*) FROM {{schema}}.events WHERE published_at IS NULL AND dead_at IS NULL AND available_at IS NOT NULL),
    (SELECT now() - created_at FROM {{schema}}.events WHERE published_at IS NULL AND dead_at IS NULL AND available_at IS NOT NULL ORDER BY seq LIMIT 1),
    (SELECT count(*) FROM {{schema}}.events WHERE dead_at IS NOT NULL AND discarded_at IS NULL),
    (SELECT count(DISTINCT (aggregate_type, aggregate_id)) FROM {{schema}}.events WHERE dead_at IS NOT NULL AND discarded_at IS NULL),
    coalesce((SELECT max(seq) FROM {{schema}}.events), 0),
    CASE WHEN @after::bigint > 0 THEN (SELECT count(*) FROM {{schema}}.events WHERE seq > @after::bigint) ELSE 0 END,
    coalesce((SELECT mode FROM {{schema}}.relay_config), ''),
    coalesce((SELECT partitions FROM {{schema}}.relay_config), 0),
    now(),
    pg_table_size('{{schema}}.events'::regclass),
    pg_indexes_size('{{schema}}.events'::regclass),
    greatest((SELECT reltuples FROM pg_class WHERE oid = '{{schema}}.events'::regclass), 0)::bigint,
    greatest((SELECT reltuples FROM pg_class WHERE oid = '{{schema}}.events_archive'::regclass), 0)::bigint,
    (SELECT created_at FROM {{schema}}.events ORDER BY seq LIMIT 1)
