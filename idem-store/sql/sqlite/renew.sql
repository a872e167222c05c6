UPDATE idempotency_keys
SET locked_until = strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch')
WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing'
    AND reservation = $5 AND attempt = $6
