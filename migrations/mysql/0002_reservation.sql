-- idem: the identity of a staged key's reservation, which fences its attempts' writes with the
-- attempt number: after an operator deletes a key and a new request reserves it again (at
-- attempt 1 again), an attempt of the deleted reservation writes nothing into the new row.
-- NULL for atomic mode's rows, which never need it; the processing rows of before it read as
-- reservation 0, which their attempts' writes name.
--
-- DDL commits on its own in MySQL, before the migration is recorded: the column is added only
-- where it is missing, so that a run interrupted in between is finished by the next one
-- (MySQL 8 has no `ADD COLUMN IF NOT EXISTS`); the update runs again harmlessly.
SET @idem_ddl = (
    SELECT IF(count(*) = 0,
        'ALTER TABLE idempotency_keys ADD COLUMN reservation BIGINT',
        'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys'
        AND column_name = 'reservation');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
UPDATE idempotency_keys SET reservation = 0 WHERE status = 'processing' AND reservation IS NULL;
