-- idem: one row per (scope, operation, idempotency_key).
-- See ARCHITECTURE.md, "The key table", for the meaning of every column.
-- Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', the format of SQLite's date functions,
-- so they sort as text and `datetime('now')` compares with them.
CREATE TABLE idempotency_keys (
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

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
