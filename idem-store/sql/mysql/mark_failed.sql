UPDATE idempotency_outbox
SET attempts = attempts + 1, last_error = ?, status = CASE WHEN ? THEN 'dead' ELSE 'pending' END,
    next_attempt_at = DATE_ADD('1970-01-01', INTERVAL ((CASE WHEN ? THEN ? ELSE ? END) * 1000)
    MICROSECOND), locked_until = NULL
WHERE id = ? AND status = 'pending'
