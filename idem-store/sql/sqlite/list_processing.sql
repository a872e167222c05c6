AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM
    idempotency_processing) AND status = 'processing' AND (locked_until IS NULL OR
    CAST(round(unixepoch(locked_until, 'auto', 'subsec') * 1000) AS INTEGER) > $1)
