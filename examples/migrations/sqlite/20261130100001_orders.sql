CREATE TABLE orders (
    id         TEXT    PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    sku        TEXT    NOT NULL,
    quantity   INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX orders_tenant ON orders (tenant);
