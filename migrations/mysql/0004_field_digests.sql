-- idem: a short salted digest per field of the request a key was first used with (never a
-- value), so that a 422 can name the fields a retry changed. NULL for rows written before it,
-- and where the operation or the configuration turns it off.
--
-- DDL commits on its own in MySQL, before the migration is recorded: the column is added only
-- where it is missing, so that a run interrupted in between is finished by the next one.
SET @idem_ddl = (
    SELECT IF(count(*) = 0,
        'ALTER TABLE idempotency_keys ADD COLUMN field_digests BLOB',
        'DO 0')
    FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys'
        AND column_name = 'field_digests');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
