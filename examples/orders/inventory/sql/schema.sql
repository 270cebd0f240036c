-- schema: the stock table, the inventory service's business table. Idempotent: Migrate
-- runs it at every start. The inbox's tables come from outboxmigrate (the inbox set).
CREATE TABLE IF NOT EXISTS stock (
    sku        text PRIMARY KEY CHECK (sku <> ''),
    -- may go below zero: units ordered beyond what is on hand are backordered
    on_hand    integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
