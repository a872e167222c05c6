-- idem: an inbox event may be `unparseable`: a signed delivery whose body the receiver could
-- not read as its event, kept for an operator rather than dropped (`idem inbox list`).
-- SQLite changes a CHECK only by making the table again: its rows are copied, ids and all.
CREATE TABLE idempotency_inbox_next (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    source        TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('waiting', 'unmatched', 'unparseable')),
    reason        TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    deliveries    INTEGER NOT NULL,
    first_seen_at TEXT    NOT NULL,
    last_seen_at  TEXT    NOT NULL,
    UNIQUE (source, event_id)
);
INSERT INTO idempotency_inbox_next (id, source, event_id, status, reason, body, deliveries,
    first_seen_at, last_seen_at)
SELECT id, source, event_id, status, reason, body, deliveries, first_seen_at, last_seen_at
FROM idempotency_inbox;
DROP TABLE idempotency_inbox;
ALTER TABLE idempotency_inbox_next RENAME TO idempotency_inbox;
