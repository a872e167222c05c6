-- idem: the identity of a staged key's reservation, which fences its attempts' writes with the
-- attempt number: after an operator deletes a key and a new request reserves it again (at
-- attempt 1 again), an attempt of the deleted reservation writes nothing into the new row.
-- NULL for atomic mode's rows, which never need it (and so store nothing for it); the
-- processing rows of before it read as reservation 0, which their attempts' writes name.
ALTER TABLE idempotency_keys ADD COLUMN reservation BIGINT;
UPDATE idempotency_keys SET reservation = 0 WHERE status = 'processing';
