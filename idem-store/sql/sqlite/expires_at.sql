SELECT CAST(round(unixepoch(expires_at, 'auto', 'subsec') * 1000) AS INTEGER)
FROM idempotency_keys
WHERE scope = $1 AND operation = $2 AND idempotency_key = $3
