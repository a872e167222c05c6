-- idem: one row per (scope, operation, idempotency_key).
-- See ARCHITECTURE.md, "The key table", for the meaning of every column.
-- `IF NOT EXISTS`: databases that idem <= 0.1 migrated through sqlx (`_sqlx_migrations`,
-- version 20261130000001) already have this exact table; the runner adopts it.
-- Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', the format of SQLite's date functions,
-- so they sort as text and `datetime('now')` compares with them.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope            TEXT    NOT NULL,
    operation        TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    fingerprint      BLOB    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('processing', 'completed')),
    response_status  INTEGER,
    response_headers TEXT,
    response_body    BLOB,
    created_at       TEXT    NOT NULL,
    completed_at     TEXT,
    expires_at       TEXT    NOT NULL,
    PRIMARY KEY (scope, operation, idempotency_key)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at ON idempotency_keys (expires_at);
