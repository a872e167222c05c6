-- idem: the inbox of incoming events that could not be applied (an event for a charge no
-- payment names, say): noted as `waiting` while their sender is told to deliver them again,
-- kept as `unmatched` once acknowledged without being applied, for an operator to settle
-- (`idem inbox list`). An event applied after all leaves the inbox. `IF NOT EXISTS`, as
-- migration 1: DDL commits on its own in MySQL.
CREATE TABLE IF NOT EXISTS idempotency_inbox (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    source        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    event_id      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    status        VARCHAR(16)  NOT NULL,
    reason        TEXT         NOT NULL,
    body          LONGTEXT     NOT NULL,
    deliveries    BIGINT       NOT NULL,
    first_seen_at DATETIME(3)  NOT NULL,
    last_seen_at  DATETIME(3)  NOT NULL,
    UNIQUE KEY idempotency_inbox_event (source, event_id),
    CONSTRAINT idempotency_inbox_status CHECK (status IN ('waiting', 'unmatched'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
