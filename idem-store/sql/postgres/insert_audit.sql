INSERT INTO idempotency_audit (at, operator, scope, operation, idempotency_key, action, reason,
    "before", "after", forced)
VALUES (to_timestamp(($1)::float8 / 1000), $2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING id
