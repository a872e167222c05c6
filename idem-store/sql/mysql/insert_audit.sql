INSERT INTO idempotency_audit (at, operator, scope, operation, idempotency_key, action, reason,
    `before`, `after`, forced)
VALUES (DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), ?, ?, ?, ?, ?, ?, ?, ?, ?)
