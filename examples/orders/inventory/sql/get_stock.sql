-- get_stock: the units of sku $1 on hand.
SELECT on_hand FROM stock WHERE sku = $1
