SELECT id, CAST(round(unixepoch(at, 'auto', 'subsec') * 1000) AS INTEGER), operator, scope,
    operation, idempotency_key, action, reason, "before", "after", forced
FROM idempotency_audit
WHERE 1 = 1
