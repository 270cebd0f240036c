-- metrics_gauges: outboxprom's cheap database gauges, one round trip. Parameters, by name
-- (outboxprom's gaugeParams): @owner, this relay's owner id; @mode, its mode;
-- @partitions, its partition count; @in_flight, its batch timeout and a margin.
--   the events table's and its indexes' sizes (catalog lookups, no scan);
--   the age of the oldest transaction snapshot of the database (backend_xmin: it holds
--   back vacuum of the events table);
--   whether a pending event that is due lies where this relay may claim (its leased
--   partitions in ordered mode; anywhere in unordered mode) — one probe of
--   events_pending with LIMIT 1. Due: available now, or within @in_flight — rows held in flight
--   by a Publish call that outlived its batch are pending with available_at up to the
--   batch timeout ahead, and a hung sink must count as a stall; a retry backing off for
--   longer is no backlog of the relay's (nor is a delayed event, nor a paused one);
--   how many leases this relay holds.
SELECT pg_table_size('{{schema}}.events'::regclass) AS table_bytes,
       pg_indexes_size('{{schema}}.events'::regclass) AS index_bytes,
       coalesce((SELECT extract(epoch FROM now() - min(xact_start)) FROM pg_stat_activity
                 WHERE backend_xmin IS NOT NULL AND datname = current_database()), 0)::float8 AS oldest_xmin_seconds,
       EXISTS (SELECT FROM {{schema}}.events e
               WHERE e.published_at IS NULL AND e.dead_at IS NULL AND e.available_at <= now() + @in_flight::interval
                 -- not held by a dead event of its aggregate (events_held): a blocked
                 -- aggregate is visible in its own gauge, it is no stall of the relay
                 AND NOT EXISTS (SELECT FROM {{schema}}.events h
                                 WHERE h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id
                                   AND h.dead_at IS NOT NULL AND h.discarded_at IS NULL AND h.seq < e.seq)
                 -- not paused (outbox pause): a paused scope is held on purpose, no stall
                 AND NOT EXISTS (SELECT FROM {{schema}}.pauses ps
                                 WHERE ps.resumed_at IS NULL
                                   AND (ps.scope = 'all' OR ps.aggregate_type = e.aggregate_type
                                        OR ps.partition = e.partition::int * @partitions::int / 4096))
                 AND (@mode = 'unordered' OR e.partition::int * @partitions::int / 4096 IN
                      (SELECT partition FROM {{schema}}.leases WHERE owner = @owner AND expires_at > now()))
               LIMIT 1) AS owned_backlog,
       (SELECT count(*) FROM {{schema}}.leases WHERE owner = @owner AND expires_at > now()) AS leases_held
