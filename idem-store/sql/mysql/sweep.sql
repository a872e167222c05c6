DELETE FROM idempotency_keys
WHERE status = 'completed' AND expires_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000)
    MICROSECOND)
ORDER BY expires_at LIMIT ?
