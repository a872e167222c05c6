AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM
    idempotency_processing) AND status = 'processing' AND locked_until <= to_timestamp(($1)::float8
    / 1000)
