-- idem: staged mode, the operator's audit trail, and the key's lock with its look-again.
-- See ARCHITECTURE.md, "The key table", for the meaning of every column.
-- Adding nullable columns and columns with constant defaults rewrites nothing: existing
-- (atomic-mode) rows read as attempt 0 with no lease, journal or request.

-- The lease of the attempt running a staged key: past it, the key is stuck and may be taken
-- over.
ALTER TABLE idempotency_keys ADD COLUMN locked_until TIMESTAMPTZ;
-- The fencing number: 1 for the first attempt, one more at every takeover or release; every
-- write of an attempt names it and is refused once it changed.
ALTER TABLE idempotency_keys ADD COLUMN attempt BIGINT NOT NULL DEFAULT 0;
-- The last journaled step, and the journal: a JSON object from step name to its result.
ALTER TABLE idempotency_keys ADD COLUMN recovery_point TEXT;
ALTER TABLE idempotency_keys ADD COLUMN journal TEXT;
-- The request a staged key was reserved with (JSON), for resuming without its client.
ALTER TABLE idempotency_keys ADD COLUMN request TEXT;

CREATE INDEX idempotency_keys_leases ON idempotency_keys (locked_until)
    WHERE status = 'processing';

-- Every operator action on a key: who, when, what, and the row before and after (JSON).
CREATE TABLE idempotency_audit (
    id              BIGSERIAL   PRIMARY KEY,
    at              TIMESTAMPTZ NOT NULL,
    operator        TEXT        NOT NULL,
    scope           TEXT        NOT NULL,
    operation       TEXT        NOT NULL,
    idempotency_key TEXT        NOT NULL,
    action          TEXT        NOT NULL,
    reason          TEXT,
    before          TEXT,
    after           TEXT
);

CREATE INDEX idempotency_audit_key ON idempotency_audit (scope, operation, idempotency_key);

-- Called in the round trip that begins an atomic execution: takes the key's advisory lock
-- (waiting at most `lock_timeout`), then refuses to go on when the key's row exists (or, when
-- an expired row is being replaced, exists unexpired): a concurrent execution committed while
-- this one waited, and its answer is the answer. SQLSTATE IK001.
CREATE FUNCTION idem_lock_key(p_lock BIGINT, p_scope TEXT, p_operation TEXT, p_key TEXT,
                              p_expired_by TIMESTAMPTZ) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock);
    IF EXISTS (SELECT 1 FROM idempotency_keys
               WHERE scope = p_scope AND operation = p_operation AND idempotency_key = p_key
                 AND (p_expired_by IS NULL OR expires_at > p_expired_by)) THEN
        RAISE EXCEPTION USING ERRCODE = 'IK001',
            MESSAGE = 'idem: the key was stored while this execution waited for its lock';
    END IF;
END
$$;
