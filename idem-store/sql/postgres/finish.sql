UPDATE idempotency_keys
SET status = 'completed', response_status = $1, response_headers = $2, response_body = $3,
    completed_at = to_timestamp(($4)::float8 / 1000), expires_at = to_timestamp(($5)::float8 /
    1000), locked_until = NULL
WHERE scope = $6 AND operation = $7 AND idempotency_key = $8 AND status = 'processing'
    AND reservation = $9 AND attempt = $10
