-- take_stock: an order takes $2 units of sku $1; no row when the sku is unknown.
UPDATE stock SET on_hand = on_hand - $2, updated_at = now()
WHERE sku = $1
RETURNING on_hand
