-- idem: the operations services run, as they registered them at start, for the operator
-- tool and the generated documentation. One row per operation id; a registration replaces
-- the earlier one. Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', as in the key table.
CREATE TABLE idempotency_operations (
    operation     TEXT    PRIMARY KEY,
    scope         TEXT    NOT NULL,
    ttl_ms        INTEGER NOT NULL,
    mode          TEXT    NOT NULL CHECK (mode IN ('atomic', 'staged')),
    lease_ms      INTEGER,
    registered_at TEXT    NOT NULL
);
