UPDATE idempotency_keys
SET attempt = attempt + 1, locked_until = strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch')
WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing'
    AND reservation = $5 AND attempt = $6
    AND (locked_until IS NULL OR locked_until <= strftime('%Y-%m-%d %H:%M:%f', $7 / 1000.0, 'unixepoch'))
RETURNING attempt, journal, request, fingerprint
