-- (No notice that the table exists, which sqlx would log at INFO on every start.)
SET LOCAL client_min_messages = warning;
CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version     BIGINT      PRIMARY KEY,
    description TEXT        NOT NULL,
    checksum    BYTEA       NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now())
