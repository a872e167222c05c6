DELETE FROM idempotency_keys
WHERE scope = ? AND operation = ? AND idempotency_key = ?
