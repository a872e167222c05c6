-- idem: the inbox of incoming events that could not be applied (an event for a charge no
-- payment names, say): noted as `waiting` while their sender is told to deliver them again,
-- kept as `unmatched` once acknowledged without being applied, for an operator to settle
-- (`idem inbox list`). An event applied after all leaves the inbox. Timestamps are UTC text
-- 'YYYY-MM-DD HH:MM:SS.SSS', as in the key table.
CREATE TABLE idempotency_inbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    source        TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('waiting', 'unmatched')),
    reason        TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    deliveries    INTEGER NOT NULL,
    first_seen_at TEXT    NOT NULL,
    last_seen_at  TEXT    NOT NULL,
    UNIQUE (source, event_id)
);
