SELECT id, (extract(epoch FROM at) * 1000)::int8, operator, scope, operation, idempotency_key,
    action, reason, "before", "after", forced
FROM idempotency_audit
WHERE 1 = 1
