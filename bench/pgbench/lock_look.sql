-- The key's lock as idem takes it now: BEGIN and `idem_lock_key` (the advisory lock, then a
-- look at the key's row by primary key) in one round trip, then COMMIT. Against
-- lock_only.sql: what the look-again costs the database per first execution. (`:k::text`:
-- `text || bigint` would be `textanycat`, a SQL function the planner inlines by parsing its
-- body on every call, which the runtime's literal key never costs.)
\set k random(1, 9000000000000000000)
BEGIN \; SELECT idem_lock_key(:k, 'tenant:bench', 'create_order:v1', 'bench-' || :k::text, NULL);
COMMIT;
