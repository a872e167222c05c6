CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version     BIGINT PRIMARY KEY,
    description TEXT   NOT NULL,
    checksum    BLOB   NOT NULL,
    applied_at  TEXT   NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')))
