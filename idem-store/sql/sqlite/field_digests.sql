SELECT field_digests
FROM idempotency_keys
WHERE scope = $1 AND operation = $2 AND idempotency_key = $3
