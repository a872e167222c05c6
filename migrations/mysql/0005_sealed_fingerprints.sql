-- idem: room for a sealed fingerprint. With storage keys set (`Config::storage_keys`), a
-- key's fingerprint is stored sealed: the key id, a nonce and a tag beside the 32 bytes of
-- SHA-256, up to 120 bytes. PostgreSQL's and SQLite's columns have no length.
--
-- DDL commits on its own in MySQL, before the migration is recorded: widening an already
-- wide column changes nothing, so a run interrupted in between is finished by the next one.
ALTER TABLE idempotency_keys MODIFY fingerprint VARBINARY(255) NOT NULL;
