-- Anatomy, prepared statements like sqlx's: the floor's transaction alone.
BEGIN;
INSERT INTO orders (id, tenant, sku, quantity) VALUES (gen_random_uuid(), 'bench', 'BENCH-1', 1);
COMMIT;
