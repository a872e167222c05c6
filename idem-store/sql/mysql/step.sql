UPDATE idempotency_keys
SET recovery_point = ?, journal = ?, locked_until = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000)
    MICROSECOND)
WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing'
    AND reservation = ? AND attempt = ?
