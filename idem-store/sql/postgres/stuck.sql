SELECT scope, operation, idempotency_key, attempt, reservation
FROM idempotency_keys
WHERE (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM
    idempotency_processing WHERE operation = $1) AND status = 'processing' AND operation = $2 AND
    locked_until <= to_timestamp(($3)::float8 / 1000) AND attempt < $4
ORDER BY locked_until LIMIT $5
