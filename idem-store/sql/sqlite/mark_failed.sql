UPDATE idempotency_outbox
SET attempts = attempts + 1, last_error = $1, status = CASE WHEN $2 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', (CASE WHEN $3 THEN $4 ELSE $5 END) / 1000.0,
    'unixepoch'), locked_until = NULL
WHERE id = $6 AND status = 'pending'
