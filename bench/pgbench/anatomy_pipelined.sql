-- Anatomy, prepared and pipelined: all of a first execution's statements (the key's lock,
-- the lookup, the floor's INSERT, the key row) in the floor's three round trips, as a driver
-- that pipelines could send them (sqlx cannot). The least the database itself can be made
-- to pay for this protocol; pgbench's pipeline mode, no HTTP, no runtime.
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN;
SELECT pg_advisory_xact_lock(:k);
SELECT fingerprint, status, response_status, response_headers, response_body, expires_at FROM idempotency_keys WHERE scope = 'tenant-anatomy' AND operation = 'create_order-v1' AND idempotency_key = 'pipelined-' || :k::text;
\endpipeline
INSERT INTO orders (id, tenant, sku, quantity) VALUES (gen_random_uuid(), 'bench', 'BENCH-1', 1);
\startpipeline
INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, response_status, response_headers, response_body, created_at, completed_at, expires_at) VALUES ('tenant-anatomy', 'create_order-v1', 'pipelined-' || :k::text, sha256('x'::bytea), 'completed', 201, '[["content-type","application/json"],["location","/orders/6f1c3a52-7f3e-4c1e-9a53-0c2e4c7f1b11"]]', convert_to(repeat('x', 80), 'UTF8'), now(), now(), now() + interval '1 day');
COMMIT;
\endpipeline
