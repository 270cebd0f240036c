-- insert_order: one new order; returns the time the database gave it.
INSERT INTO orders (id, customer, sku, quantity)
VALUES ($1, $2, $3, $4)
RETURNING created_at
