DELETE FROM idempotency_outbox
WHERE status = 'delivered' AND delivered_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000)
    MICROSECOND)
ORDER BY delivered_at LIMIT ?
