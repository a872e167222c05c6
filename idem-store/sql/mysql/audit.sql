SELECT id, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', at) DIV 1000), operator, scope, operation,
    idempotency_key, action, reason, `before`, `after`, forced
FROM idempotency_audit
WHERE 1 = 1
