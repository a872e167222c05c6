-- The least a replay can cost: one row by primary key (run against 100 stored keys).
\set n random(0, 99)
SELECT fingerprint, status, response_status, response_headers, response_body, expires_at
  FROM idempotency_keys
 WHERE scope = 'tenant:bench' AND operation = 'create_order:v1' AND idempotency_key = 'replay-' || CAST(:n AS text);
