-- Anatomy, prepared statements like sqlx's: the floor plus the key lookup (a key not stored).
\set k random(1, 9000000000000000000)
SELECT fingerprint, status, response_status, response_headers, response_body, expires_at FROM idempotency_keys WHERE scope = 'tenant-anatomy' AND operation = 'create_order-v1' AND idempotency_key = 'lookup-' || :k::text;
BEGIN;
INSERT INTO orders (id, tenant, sku, quantity) VALUES (gen_random_uuid(), 'bench', 'BENCH-1', 1);
COMMIT;
