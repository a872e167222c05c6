UPDATE idempotency_keys
SET status = 'completed', response_status = $1, response_headers = $2, response_body = $3,
    completed_at = strftime('%Y-%m-%d %H:%M:%f', $4 / 1000.0, 'unixepoch'), expires_at =
    strftime('%Y-%m-%d %H:%M:%f', $5 / 1000.0, 'unixepoch'), locked_until = NULL
WHERE scope = $6 AND operation = $7 AND idempotency_key = $8 AND status = 'processing'
    AND reservation = $9 AND attempt = $10
