-- The least a replay can cost: one row by primary key (run against 100 stored keys).
-- No `:` in the literals (E'\x3a'): prepared (-M prepared), pgbench takes `:word` in a
-- literal for a parameter.
\set n random(0, 99)
SELECT fingerprint, status, response_status, response_headers, response_body, expires_at
  FROM idempotency_keys
 WHERE scope = E'tenant\x3abench' AND operation = E'create_order\x3av1' AND idempotency_key = 'replay-' || CAST(:n AS text);
