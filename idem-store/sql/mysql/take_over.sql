UPDATE idempotency_keys
SET attempt = attempt + 1, locked_until = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)
WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing'
    AND reservation = ? AND attempt = ?
    AND (locked_until IS NULL OR locked_until <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))
