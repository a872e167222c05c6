UPDATE idempotency_keys
SET expires_at = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)
WHERE scope = ? AND operation = ? AND idempotency_key = ? AND (TIMESTAMPDIFF(MICROSECOND,
    '1970-01-01', expires_at) DIV 1000) > ?
