SELECT scope, operation, idempotency_key, attempt, reservation
FROM idempotency_keys
WHERE (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM
    idempotency_processing WHERE operation = ?) AND status = 'processing' AND operation = ? AND
    locked_until <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) AND attempt < ?
ORDER BY locked_until LIMIT ?
