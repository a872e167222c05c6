-- The key's lock as idem took it before it looked again: BEGIN and the advisory lock in one
-- round trip (a new key every transaction), then COMMIT.
\set k random(1, 9000000000000000000)
BEGIN \; SELECT pg_advisory_xact_lock(:k);
COMMIT;
