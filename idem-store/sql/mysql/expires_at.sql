SELECT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000)
FROM idempotency_keys
WHERE scope = ? AND operation = ? AND idempotency_key = ?
