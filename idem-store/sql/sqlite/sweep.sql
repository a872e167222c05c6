DELETE FROM idempotency_keys
WHERE (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM
    idempotency_keys WHERE status = 'completed' AND expires_at <= strftime('%Y-%m-%d %H:%M:%f', $1 /
    1000.0, 'unixepoch') LIMIT $2)
