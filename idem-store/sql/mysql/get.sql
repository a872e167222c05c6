SELECT scope, operation, idempotency_key, fingerprint, status, response_status, response_headers,
    response_body, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) DIV 1000),
    (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', completed_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND,
    '1970-01-01', expires_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', locked_until) DIV
    1000), attempt, recovery_point, reservation
FROM idempotency_keys
WHERE scope = ? AND operation = ? AND idempotency_key = ?
