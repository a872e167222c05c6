-- idem: the keys staged mode holds, in a table of their own instead of a partial index on
-- the key table (which every first execution of atomic mode maintained, though only staged
-- mode's few processing rows were ever in it).
--
-- A row per key whose status is `processing`, kept by the triggers below. Listings of
-- processing and stuck keys, and the reconciler, start from it.
CREATE TABLE idempotency_processing (
    scope           TEXT NOT NULL,
    operation       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    PRIMARY KEY (scope, operation, idempotency_key)
) WITHOUT ROWID;

INSERT INTO idempotency_processing (scope, operation, idempotency_key)
    SELECT scope, operation, idempotency_key FROM idempotency_keys WHERE status = 'processing';

DROP INDEX idempotency_keys_leases;

CREATE TRIGGER idempotency_processing_reserved
    AFTER INSERT ON idempotency_keys FOR EACH ROW WHEN NEW.status = 'processing'
BEGIN
    INSERT OR IGNORE INTO idempotency_processing (scope, operation, idempotency_key)
        VALUES (NEW.scope, NEW.operation, NEW.idempotency_key);
END;

-- An expired completed key reserved again by staged mode (an upsert).
CREATE TRIGGER idempotency_processing_reopened
    AFTER UPDATE OF status ON idempotency_keys FOR EACH ROW
    WHEN OLD.status <> 'processing' AND NEW.status = 'processing'
BEGIN
    INSERT OR IGNORE INTO idempotency_processing (scope, operation, idempotency_key)
        VALUES (NEW.scope, NEW.operation, NEW.idempotency_key);
END;

CREATE TRIGGER idempotency_processing_completed
    AFTER UPDATE OF status ON idempotency_keys FOR EACH ROW
    WHEN OLD.status = 'processing' AND NEW.status <> 'processing'
BEGIN
    DELETE FROM idempotency_processing
     WHERE scope = OLD.scope AND operation = OLD.operation
       AND idempotency_key = OLD.idempotency_key;
END;

CREATE TRIGGER idempotency_processing_deleted
    AFTER DELETE ON idempotency_keys FOR EACH ROW WHEN OLD.status = 'processing'
BEGIN
    DELETE FROM idempotency_processing
     WHERE scope = OLD.scope AND operation = OLD.operation
       AND idempotency_key = OLD.idempotency_key;
END;
