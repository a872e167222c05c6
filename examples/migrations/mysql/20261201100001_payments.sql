-- The payments example's table on MySQL / MariaDB.
CREATE TABLE payments (
    id         VARCHAR(64)  NOT NULL PRIMARY KEY,
    tenant     VARCHAR(255) NOT NULL,
    amount     BIGINT       NOT NULL CHECK (amount BETWEEN 1 AND 1000000),
    currency   VARCHAR(16)  NOT NULL,
    customer   TEXT         NOT NULL,
    charge_id  VARCHAR(255) NOT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY payments_charge_id (charge_id),
    KEY payments_tenant (tenant)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
