UPDATE idempotency_outbox
SET status = 'delivered', delivered_at = strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch'),
    locked_until = NULL
WHERE id = $2 AND status = 'pending'
