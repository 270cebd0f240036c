-- seed_stock: sku $1 starts with $2 units on hand, unless it is already stocked.
INSERT INTO stock (sku, on_hand) VALUES ($1, $2)
ON CONFLICT (sku) DO NOTHING
