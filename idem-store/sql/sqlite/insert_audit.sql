INSERT INTO idempotency_audit (at, operator, scope, operation, idempotency_key, action, reason,
    "before", "after", forced)
VALUES (strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch'), $2, $3, $4, $5, $6, $7, $8, $9,
    $10)
RETURNING id
