INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, request,
    created_at, expires_at, locked_until, attempt, reservation,
    field_digests)
VALUES (?, ?, ?, ?, 'processing', ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND),
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), DATE_ADD('1970-01-01', INTERVAL ((?)
    * 1000) MICROSECOND), 1, ?, ?)
