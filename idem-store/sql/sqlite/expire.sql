UPDATE idempotency_keys
SET expires_at = strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch')
WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND CAST(round(unixepoch(expires_at,
    'auto', 'subsec') * 1000) AS INTEGER) > $5
RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, response_headers,
    response_body, CAST(round(unixepoch(created_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(completed_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(expires_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(locked_until, 'auto', 'subsec') * 1000) AS INTEGER), attempt,
    recovery_point, reservation
