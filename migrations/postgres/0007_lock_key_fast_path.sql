-- idem: the key's lock without a second executor run when nobody holds it.
--
-- `idem_lock_key` (migration 2) took the advisory lock with `PERFORM`, which PL/pgSQL runs as
-- a query of its own (executor start, snapshot, portal) on every first execution. A
-- boolean test is evaluated as a simple expression instead: `pg_try_advisory_xact_lock`
-- takes the lock at once when it is free, and only a key that is held (a duplicate in
-- flight) waits for it as before, with `PERFORM pg_advisory_xact_lock`, bounded by
-- `lock_timeout`. The same lock either way; the look at the key's row that follows is
-- unchanged and runs with a snapshot taken after the lock is held. Same signature: processes
-- of the previous version call it unchanged during a rolling deploy.
CREATE OR REPLACE FUNCTION idem_lock_key(p_lock BIGINT, p_scope TEXT, p_operation TEXT, p_key TEXT,
                                         p_expired_by TIMESTAMPTZ) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(p_lock) THEN
        PERFORM pg_advisory_xact_lock(p_lock);
    END IF;
    IF EXISTS (SELECT 1 FROM idempotency_keys
               WHERE scope = p_scope AND operation = p_operation AND idempotency_key = p_key
                 AND (p_expired_by IS NULL OR expires_at > p_expired_by)) THEN
        RAISE EXCEPTION USING ERRCODE = 'IK001',
            MESSAGE = 'idem: the key was stored while this execution waited for its lock';
    END IF;
END
$$;
