INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, request,
    created_at, expires_at, locked_until, attempt, reservation,
    field_digests)
VALUES ($1, $2, $3, $4, 'processing', $5, strftime('%Y-%m-%d %H:%M:%f', $6 / 1000.0, 'unixepoch'),
    strftime('%Y-%m-%d %H:%M:%f', $7 / 1000.0, 'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', $8 /
    1000.0, 'unixepoch'), 1, $9, $10)
ON CONFLICT (scope, operation, idempotency_key) DO NOTHING
