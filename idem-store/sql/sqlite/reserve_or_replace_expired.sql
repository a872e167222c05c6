INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, request,
    created_at, expires_at, locked_until, attempt, reservation,
    field_digests)
VALUES ($1, $2, $3, $4, 'processing', $5, strftime('%Y-%m-%d %H:%M:%f', $6 / 1000.0, 'unixepoch'),
    strftime('%Y-%m-%d %H:%M:%f', $7 / 1000.0, 'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', $8 /
    1000.0, 'unixepoch'), 1, $9, $10)
ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET fingerprint = excluded.fingerprint,
    status = 'processing', request = excluded.request, created_at = excluded.created_at, expires_at
    = excluded.expires_at, locked_until = excluded.locked_until, attempt = 1, reservation =
    excluded.reservation, field_digests = excluded.field_digests, journal = NULL, recovery_point = NULL, response_status = NULL,
    response_headers = NULL, response_body = NULL, completed_at = NULL
WHERE idempotency_keys.status = 'completed' AND idempotency_keys.expires_at <= excluded.created_at
