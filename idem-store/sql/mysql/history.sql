CREATE TABLE IF NOT EXISTS idem_schema_migrations (
    version     BIGINT        NOT NULL PRIMARY KEY,
    description TEXT          NOT NULL,
    checksum    VARBINARY(32) NOT NULL,
    applied_at  TIMESTAMP(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE = InnoDB
