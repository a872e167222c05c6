CREATE TABLE orders (
    id         UUID        PRIMARY KEY,
    tenant     TEXT        NOT NULL,
    sku        TEXT        NOT NULL,
    quantity   INTEGER     NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX orders_tenant ON orders (tenant);
