UPDATE idempotency_keys
SET status = 'completed', response_status = ?, response_headers = ?, response_body = ?, completed_at
    = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), expires_at = DATE_ADD('1970-01-01',
    INTERVAL ((?) * 1000) MICROSECOND), locked_until = NULL
WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing'
    AND reservation = ? AND attempt = ?
