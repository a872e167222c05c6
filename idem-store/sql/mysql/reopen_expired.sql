UPDATE idempotency_keys
SET fingerprint = ?, request = ?, created_at = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000)
    MICROSECOND), locked_until = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), attempt
    = 1, journal = NULL, recovery_point = NULL, response_status = NULL, response_headers = NULL,
    response_body = NULL, completed_at = NULL, status = 'processing', expires_at =
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), reservation = ?, field_digests = ?
WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'completed' AND expires_at <=
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)
