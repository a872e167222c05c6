-- idem: one row per (scope, operation, idempotency_key).
-- See ARCHITECTURE.md, "The key table", for the meaning of every column.
-- `IF NOT EXISTS`: databases that idem <= 0.1 migrated through sqlx (`_sqlx_migrations`,
-- version 20261130000001) already have this exact table; the runner adopts it.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope            TEXT        NOT NULL,
    operation        TEXT        NOT NULL,
    idempotency_key  TEXT        NOT NULL,
    fingerprint      BYTEA       NOT NULL,
    status           TEXT        NOT NULL CHECK (status IN ('processing', 'completed')),
    response_status  INTEGER,
    response_headers TEXT,
    response_body    BYTEA,
    created_at       TIMESTAMPTZ NOT NULL,
    completed_at     TIMESTAMPTZ,
    expires_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (scope, operation, idempotency_key)
);

CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at ON idempotency_keys (expires_at);
