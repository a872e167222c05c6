-- The least a durable create can cost: one order row in its own transaction.
BEGIN;
INSERT INTO orders (id, tenant, sku, quantity) VALUES (gen_random_uuid(), 'bench', 'BENCH-1', 1);
COMMIT;
