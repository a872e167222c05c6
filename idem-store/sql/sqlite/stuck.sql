SELECT scope, operation, idempotency_key, attempt, reservation
FROM idempotency_keys
WHERE (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM
    idempotency_processing WHERE operation = $1) AND status = 'processing' AND operation = $2 AND
    locked_until <= strftime('%Y-%m-%d %H:%M:%f', $3 / 1000.0, 'unixepoch') AND attempt < $4
ORDER BY locked_until LIMIT $5
