-- idem: the keys staged mode holds, in a table of their own instead of a partial index on
-- the key table. An index on `idempotency_keys` costs every first execution of atomic mode
-- (each insert opens, checks and maintains it), though only staged mode's few processing
-- rows are ever in it; this table is written by staged mode alone.
--
-- A row per key whose status is `processing`: inserted by the statement that reserves the
-- key (staged mode's RESERVE), removed by the triggers below when the key stops processing
-- (completed by its attempt or an operator) or is deleted. Listings of processing and stuck
-- keys, and the reconciler, start from it.
CREATE TABLE idempotency_processing (
    scope           TEXT NOT NULL,
    operation       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    PRIMARY KEY (scope, operation, idempotency_key)
);

INSERT INTO idempotency_processing (scope, operation, idempotency_key)
    SELECT scope, operation, idempotency_key FROM idempotency_keys WHERE status = 'processing';

DROP INDEX idempotency_keys_leases;

-- Only UPDATE and DELETE triggers: an INSERT into the key table (atomic mode's first
-- execution) fires nothing.
CREATE FUNCTION idem_processing_done() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM idempotency_processing
     WHERE scope = OLD.scope AND operation = OLD.operation
       AND idempotency_key = OLD.idempotency_key;
    RETURN NULL;
END
$$;

CREATE TRIGGER idempotency_processing_completed
    AFTER UPDATE OF status ON idempotency_keys FOR EACH ROW
    WHEN (OLD.status = 'processing' AND NEW.status <> 'processing')
    EXECUTE FUNCTION idem_processing_done();

CREATE TRIGGER idempotency_processing_deleted
    AFTER DELETE ON idempotency_keys FOR EACH ROW
    WHEN (OLD.status = 'processing')
    EXECUTE FUNCTION idem_processing_done();
