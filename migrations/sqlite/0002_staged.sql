-- idem: staged mode and the operator's audit trail.
-- See ARCHITECTURE.md, "The key table", for the meaning of every column.
-- Existing (atomic-mode) rows read as attempt 0 with no lease, journal or request.

-- The lease of the attempt running a staged key: past it, the key is stuck and may be taken
-- over.
ALTER TABLE idempotency_keys ADD COLUMN locked_until TEXT;
-- The fencing number: 1 for the first attempt, one more at every takeover or release; every
-- write of an attempt names it and is refused once it changed.
ALTER TABLE idempotency_keys ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
-- The last journaled step, and the journal: a JSON object from step name to its result.
ALTER TABLE idempotency_keys ADD COLUMN recovery_point TEXT;
ALTER TABLE idempotency_keys ADD COLUMN journal TEXT;
-- The request a staged key was reserved with (JSON), for resuming without its client.
ALTER TABLE idempotency_keys ADD COLUMN request TEXT;

CREATE INDEX idempotency_keys_leases ON idempotency_keys (locked_until)
    WHERE status = 'processing';

-- Every operator action on a key: who, when, what, and the row before and after (JSON).
CREATE TABLE idempotency_audit (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              TEXT    NOT NULL,
    operator        TEXT    NOT NULL,
    scope           TEXT    NOT NULL,
    operation       TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    action          TEXT    NOT NULL,
    reason          TEXT,
    before          TEXT,
    after           TEXT
);

CREATE INDEX idempotency_audit_key ON idempotency_audit (scope, operation, idempotency_key);
