-- schema: the orders table, the service's business table. Idempotent: Migrate runs it
-- at every start. The outbox's own tables come from outboxmigrate.
CREATE TABLE IF NOT EXISTS orders (
    id         uuid PRIMARY KEY,
    customer   text NOT NULL CHECK (customer <> ''),
    sku        text NOT NULL CHECK (sku <> ''),
    quantity   integer NOT NULL CHECK (quantity > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
