UPDATE idempotency_keys
SET locked_until = to_timestamp(($1)::float8 / 1000)
WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing'
    AND reservation = $5 AND attempt = $6
