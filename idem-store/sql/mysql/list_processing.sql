AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM
    idempotency_processing) AND status = 'processing' AND (locked_until IS NULL OR locked_until >
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))
