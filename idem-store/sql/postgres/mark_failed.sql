UPDATE idempotency_outbox
SET attempts = attempts + 1, last_error = $1, status = CASE WHEN $2 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = to_timestamp((CASE WHEN $3 THEN $4 ELSE $5 END)::float8 / 1000), locked_until
    = NULL
WHERE id = $6 AND status = 'pending'
