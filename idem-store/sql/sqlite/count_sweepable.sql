SELECT count(*)
FROM idempotency_keys
WHERE status = 'completed' AND expires_at <= strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch')
