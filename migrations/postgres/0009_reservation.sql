-- idem: the identity of a staged key's reservation, which fences its attempts' writes with the
-- attempt number: after an operator deletes a key and a new request reserves it again (at
-- attempt 1 again), an attempt of the deleted reservation writes nothing into the new row.
-- A constant default rewrites nothing: rows reserved before read as reservation 0.
ALTER TABLE idempotency_keys ADD COLUMN reservation BIGINT NOT NULL DEFAULT 0;
