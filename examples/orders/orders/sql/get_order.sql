-- get_order: one order by id.
SELECT id, customer, sku, quantity, created_at
FROM orders
WHERE id = $1
