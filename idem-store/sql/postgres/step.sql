UPDATE idempotency_keys
SET recovery_point = $1, journal = $2, locked_until = to_timestamp(($3)::float8 / 1000)
WHERE scope = $4 AND operation = $5 AND idempotency_key = $6 AND status = 'processing'
    AND reservation = $7 AND attempt = $8
