-- idem: the transactional outbox. A message is inserted in the same transaction as the
-- writes it announces and delivered afterwards, at least once, by a dispatcher.
-- `pending` rows are due once `next_attempt_at` has passed; a dispatcher that claims one
-- sets `locked_until` (its lease) and nobody else claims it before then.
-- Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', as in the key table.
CREATE TABLE idempotency_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    dedup_id        TEXT    NOT NULL UNIQUE,
    topic           TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT    NOT NULL,
    locked_until    TEXT,
    last_error      TEXT,
    created_at      TEXT    NOT NULL,
    delivered_at    TEXT
);

-- The dispatcher's claim: pending rows in `id` order, the due ones taken. Only pending rows
-- are in the index, so delivered and dead rows cost the claim nothing.
CREATE INDEX idempotency_outbox_pending
    ON idempotency_outbox (id) WHERE status = 'pending';

-- The sweep of delivered rows.
CREATE INDEX idempotency_outbox_delivered
    ON idempotency_outbox (delivered_at) WHERE status = 'delivered';
