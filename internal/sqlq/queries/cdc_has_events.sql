-- cdc_has_events: whether the schema's events table holds any row — read when a
-- change-data-capture source finds no slot and creates one (cdc/slot.go): on a table with
-- events, a missing slot is one that was lost (a failover to a replica, which has no
-- logical slots before PostgreSQL 17; a pg_upgrade, which drops them), not a first start.
SELECT EXISTS (SELECT 1 FROM {{schema}}.events)
