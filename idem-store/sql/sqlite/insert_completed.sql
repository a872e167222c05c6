INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status,
    response_status, response_headers, response_body, created_at, completed_at, expires_at,
    field_digests)
VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, strftime('%Y-%m-%d %H:%M:%f', $8 / 1000.0,
    'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', $9 / 1000.0, 'unixepoch'),
    strftime('%Y-%m-%d %H:%M:%f', $10 / 1000.0, 'unixepoch'), $11)
ON CONFLICT (scope, operation, idempotency_key) DO NOTHING
