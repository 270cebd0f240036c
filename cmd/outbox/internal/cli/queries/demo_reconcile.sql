-- demo_reconcile: the demo's reconciliation, computed from the database, one round
-- trip. @sku: the run's SKU (every order of the run, and only those, has it); @seeded:
-- the units the SKU was seeded with (each order takes 1).
--   committed: the run's orders;
--   published: their events marked published by a relay;
--   consumed: their events the inventory's inbox applied;
--   effects: the units taken off the SKU's stock (one per applied order);
--   lost: orders whose event the inbox never applied.
SELECT
    (SELECT count(*) FROM orders o WHERE o.sku = @sku) AS committed,
    (SELECT count(*) FROM orders o
        JOIN {{schema}}.events e ON e.aggregate_type = 'order' AND e.aggregate_id = o.id::text
        WHERE o.sku = @sku AND e.published_at IS NOT NULL) AS published,
    (SELECT count(*) FROM orders o
        JOIN {{schema}}.events e ON e.aggregate_type = 'order' AND e.aggregate_id = o.id::text
        JOIN {{schema}}.inbox i ON i.consumer = 'inventory' AND i.event_id = e.id
        WHERE o.sku = @sku AND i.outcome = 'applied') AS consumed,
    (SELECT @seeded::bigint - s.on_hand FROM stock s WHERE s.sku = @sku) AS effects,
    (SELECT count(*) FROM orders o
        WHERE o.sku = @sku AND NOT EXISTS (
            SELECT 1 FROM {{schema}}.events e
            JOIN {{schema}}.inbox i ON i.consumer = 'inventory' AND i.event_id = e.id AND i.outcome = 'applied'
            WHERE e.aggregate_type = 'order' AND e.aggregate_id = o.id::text)) AS lost
