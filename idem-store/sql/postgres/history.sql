DO $$
BEGIN
    -- Looked up first, rather than `CREATE TABLE IF NOT EXISTS`, whose notice that the table
    -- exists sqlx would log at INFO on every start.
    IF to_regclass('idem_schema_migrations') IS NULL THEN
        CREATE TABLE idem_schema_migrations (
            version     BIGINT      PRIMARY KEY,
            description TEXT        NOT NULL,
            checksum    BYTEA       NOT NULL,
            applied_at  TIMESTAMPTZ NOT NULL DEFAULT now());
    END IF;
END
$$
