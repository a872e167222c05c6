-- idem: the inbox of incoming events that could not be applied (an event for a charge no
-- payment names, say): noted as `waiting` while their sender is told to deliver them again,
-- kept as `unmatched` once acknowledged without being applied, for an operator to settle
-- (`idem inbox list`). An event applied after all leaves the inbox.
CREATE TABLE idempotency_inbox (
    id            BIGSERIAL   PRIMARY KEY,
    source        TEXT        NOT NULL,
    event_id      TEXT        NOT NULL,
    status        TEXT        NOT NULL CHECK (status IN ('waiting', 'unmatched')),
    reason        TEXT        NOT NULL,
    body          TEXT        NOT NULL,
    deliveries    BIGINT      NOT NULL,
    first_seen_at TIMESTAMPTZ NOT NULL,
    last_seen_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (source, event_id)
);
