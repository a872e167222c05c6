-- idem: a short salted digest per field of the request a key was first used with (never a
-- value), so that a 422 can name the fields a retry changed. NULL for rows written before it,
-- and where the operation or the configuration turns it off.
ALTER TABLE idempotency_keys ADD COLUMN field_digests BYTEA;
