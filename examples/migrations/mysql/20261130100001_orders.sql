-- The orders example's table on MySQL / MariaDB: the same columns as on PostgreSQL, the
-- order id as its UUID text.
CREATE TABLE orders (
    id         CHAR(36)     NOT NULL PRIMARY KEY,
    tenant     VARCHAR(255) NOT NULL,
    sku        TEXT         NOT NULL,
    quantity   INT          NOT NULL CHECK (quantity BETWEEN 1 AND 20),
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY orders_tenant (tenant)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
