INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status,
    response_status, response_headers, response_body, created_at, completed_at, expires_at,
    field_digests)
VALUES (?, ?, ?, ?, 'completed', ?, ?, ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND),
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), DATE_ADD('1970-01-01', INTERVAL ((?)
    * 1000) MICROSECOND), ?)
