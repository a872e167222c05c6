INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status,
    response_status, response_headers, response_body, created_at, completed_at, expires_at,
    field_digests)
VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, strftime('%Y-%m-%d %H:%M:%f', $8 / 1000.0,
    'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', $9 / 1000.0, 'unixepoch'),
    strftime('%Y-%m-%d %H:%M:%f', $10 / 1000.0, 'unixepoch'), $11)
ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET fingerprint = excluded.fingerprint,
    status = 'completed', response_status = excluded.response_status, response_headers =
    excluded.response_headers, response_body = excluded.response_body, created_at =
    excluded.created_at, completed_at = excluded.completed_at, expires_at = excluded.expires_at,
    field_digests = excluded.field_digests
WHERE idempotency_keys.status = 'completed' AND CAST(round(unixepoch(idempotency_keys.expires_at,
    'auto', 'subsec') * 1000) AS INTEGER) <= $8
