UPDATE idempotency_outbox
SET status = 'delivered', delivered_at = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND),
    locked_until = NULL
WHERE id = ? AND status = 'pending'
