DELETE FROM idempotency_keys
WHERE scope = $1 AND operation = $2 AND idempotency_key = $3
