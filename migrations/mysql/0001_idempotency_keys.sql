-- idem on MySQL / MariaDB (InnoDB): every table at once, as migrations 1 to 8 left them on
-- PostgreSQL and SQLite. See the crate's docs for the meaning of every column.
--
-- Times are DATETIME(3) in UTC: idem converts milliseconds since the Unix epoch to and from
-- them by arithmetic from 1970-01-01, never through a session's `time_zone`. The key's parts compare byte for byte (`utf8mb4_bin`): keys are
-- case-sensitive, and `LIKE` on them too. DDL commits on its own in MySQL: every statement
-- is `IF NOT EXISTS`, so that a run interrupted halfway is finished by the next one.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope            VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    operation        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idempotency_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    fingerprint      VARBINARY(64) NOT NULL,
    status           VARCHAR(16)   NOT NULL,
    response_status  INT,
    response_headers LONGTEXT,
    response_body    LONGBLOB,
    created_at       DATETIME(3)        NOT NULL,
    completed_at     DATETIME(3),
    expires_at       DATETIME(3)        NOT NULL,
    locked_until     DATETIME(3),
    attempt          BIGINT        NOT NULL DEFAULT 0,
    recovery_point   TEXT,
    journal          LONGTEXT,
    request          LONGTEXT,
    PRIMARY KEY (scope, operation, idempotency_key),
    KEY idempotency_keys_expires_at (expires_at),
    CONSTRAINT idempotency_keys_status CHECK (status IN ('processing', 'completed'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The key's lock: an execution upserts its key's row here in its own transaction, and holds
-- the row lock until it commits or rolls back (see the crate's docs, "MySQL"). The sweeper
-- deletes rows no execution took since its cutoff.
CREATE TABLE IF NOT EXISTS idempotency_locks (
    lock_id  BIGINT      NOT NULL PRIMARY KEY,
    taken_at DATETIME(3) NOT NULL,
    KEY idempotency_locks_taken_at (taken_at)
) ENGINE = InnoDB;

-- Staged mode's processing keys, kept by the key table's triggers.
CREATE TABLE IF NOT EXISTS idempotency_processing (
    scope           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    operation       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (scope, operation, idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

DROP TRIGGER IF EXISTS idempotency_processing_inserted;
CREATE TRIGGER idempotency_processing_inserted
    AFTER INSERT ON idempotency_keys FOR EACH ROW
    INSERT IGNORE INTO idempotency_processing (scope, operation, idempotency_key)
        SELECT NEW.scope, NEW.operation, NEW.idempotency_key FROM DUAL
        WHERE NEW.status = 'processing';

-- Each trigger is one statement (no `BEGIN … END`), so that the file applies as it is through
-- the `mysql`/`mariadb` client, which splits statements at `;`, as well as through idem's
-- runner. (idem 0.1.0 wrote the update trigger as one compound statement, and still accepts
-- a database it migrated so: `Migration::former_checksums`.)
DROP TRIGGER IF EXISTS idempotency_processing_updated;
DROP TRIGGER IF EXISTS idempotency_processing_reopened;
CREATE TRIGGER idempotency_processing_reopened
    AFTER UPDATE ON idempotency_keys FOR EACH ROW
    INSERT IGNORE INTO idempotency_processing (scope, operation, idempotency_key)
        SELECT NEW.scope, NEW.operation, NEW.idempotency_key FROM DUAL
        WHERE OLD.status <> 'processing' AND NEW.status = 'processing';

DROP TRIGGER IF EXISTS idempotency_processing_finished;
CREATE TRIGGER idempotency_processing_finished
    AFTER UPDATE ON idempotency_keys FOR EACH ROW
    DELETE FROM idempotency_processing
     WHERE OLD.status = 'processing' AND NEW.status <> 'processing'
       AND scope = OLD.scope AND operation = OLD.operation
       AND idempotency_key = OLD.idempotency_key;

DROP TRIGGER IF EXISTS idempotency_processing_deleted;
CREATE TRIGGER idempotency_processing_deleted
    AFTER DELETE ON idempotency_keys FOR EACH ROW
    DELETE FROM idempotency_processing
     WHERE scope = OLD.scope AND operation = OLD.operation
       AND idempotency_key = OLD.idempotency_key;

CREATE TABLE IF NOT EXISTS idempotency_audit (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at              DATETIME(3)       NOT NULL,
    operator        TEXT         NOT NULL,
    scope           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    operation       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    action          VARCHAR(32)  NOT NULL,
    reason          TEXT,
    `before`        LONGTEXT,
    `after`         LONGTEXT,
    forced          BOOLEAN      NOT NULL DEFAULT FALSE,
    KEY idempotency_audit_key (scope, operation, idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS idempotency_outbox (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    dedup_id        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    topic           TEXT         NOT NULL,
    payload         LONGTEXT     NOT NULL,
    status          VARCHAR(16)  NOT NULL DEFAULT 'pending',
    attempts        INT          NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(3)       NOT NULL,
    locked_until    DATETIME(3),
    last_error      TEXT,
    created_at      DATETIME(3)       NOT NULL,
    delivered_at    DATETIME(3),
    UNIQUE KEY idempotency_outbox_dedup_id (dedup_id),
    KEY idempotency_outbox_status (status, id),
    KEY idempotency_outbox_delivered (status, delivered_at),
    CONSTRAINT idempotency_outbox_status CHECK (status IN ('pending', 'delivered', 'dead'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS idempotency_operations (
    operation     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    scope         VARCHAR(16)  NOT NULL,
    ttl_ms        BIGINT       NOT NULL,
    mode          VARCHAR(16)  NOT NULL,
    lease_ms      BIGINT,
    registered_at DATETIME(3)       NOT NULL,
    doc           LONGTEXT,
    CONSTRAINT idempotency_operations_mode CHECK (mode IN ('atomic', 'staged'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
