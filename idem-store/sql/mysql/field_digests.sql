SELECT field_digests
FROM idempotency_keys
WHERE scope = ? AND operation = ? AND idempotency_key = ?
