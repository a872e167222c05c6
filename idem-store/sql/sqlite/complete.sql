UPDATE idempotency_keys
SET status = 'completed', response_status = $1, response_headers = $2, response_body = $3,
    completed_at = strftime('%Y-%m-%d %H:%M:%f', $4 / 1000.0, 'unixepoch'), expires_at =
    strftime('%Y-%m-%d %H:%M:%f', ($5 + COALESCE((SELECT ttl_ms FROM idempotency_operations WHERE
    operation = $6), max(CAST(round(unixepoch(expires_at, 'auto', 'subsec') * 1000) AS INTEGER) -
    CAST(round(unixepoch(created_at, 'auto', 'subsec') * 1000) AS INTEGER), 0))) / 1000.0,
    'unixepoch'), locked_until = NULL, attempt = attempt + 1
WHERE scope = $7 AND operation = $8 AND idempotency_key = $9
RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, response_headers,
    response_body, CAST(round(unixepoch(created_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(completed_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(expires_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(locked_until, 'auto', 'subsec') * 1000) AS INTEGER), attempt,
    recovery_point, reservation
