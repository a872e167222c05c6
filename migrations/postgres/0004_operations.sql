-- idem: the operations services run, as they registered them at start, for the operator
-- tool and the generated documentation. One row per operation id; a registration replaces
-- the earlier one.
CREATE TABLE idempotency_operations (
    operation     TEXT        PRIMARY KEY,
    scope         TEXT        NOT NULL,
    ttl_ms        BIGINT      NOT NULL,
    mode          TEXT        NOT NULL CHECK (mode IN ('atomic', 'staged')),
    lease_ms      BIGINT,
    registered_at TIMESTAMPTZ NOT NULL
);
