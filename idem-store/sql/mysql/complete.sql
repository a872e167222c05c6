UPDATE idempotency_keys
SET status = 'completed', response_status = ?, response_headers = ?, response_body = ?, completed_at
    = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), expires_at = DATE_ADD('1970-01-01',
    INTERVAL ((? + COALESCE((SELECT ttl_ms FROM idempotency_operations WHERE operation = ?),
    GREATEST((TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000) -
    (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) DIV 1000), 0))) * 1000) MICROSECOND),
    locked_until = NULL, attempt = attempt + 1
WHERE scope = ? AND operation = ? AND idempotency_key = ?
