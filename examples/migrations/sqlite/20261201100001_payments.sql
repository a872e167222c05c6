-- The `payments` example: one row per payment, written in the transaction that completes
-- the payment's idempotency key. The id is derived from the key, and a charge is paid for
-- once: both are unique, so no retry, takeover or reconciler pass can add a second row.
CREATE TABLE payments (
    id         TEXT    PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    amount     INTEGER NOT NULL CHECK (amount BETWEEN 1 AND 1000000),
    currency   TEXT    NOT NULL,
    customer   TEXT    NOT NULL,
    charge_id  TEXT    NOT NULL UNIQUE,
    created_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
CREATE INDEX payments_tenant ON payments (tenant);
