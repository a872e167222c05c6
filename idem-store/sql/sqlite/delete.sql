DELETE FROM idempotency_keys
WHERE scope = $1 AND operation = $2 AND idempotency_key = $3
RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, response_headers,
    response_body, CAST(round(unixepoch(created_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(completed_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(expires_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(locked_until, 'auto', 'subsec') * 1000) AS INTEGER), attempt,
    recovery_point, reservation
