SELECT recovery_point, journal, request
FROM idempotency_keys
WHERE scope = ? AND operation = ? AND idempotency_key = ?
