INSERT INTO idempotency_outbox (dedup_id, topic, payload, status, attempts, next_attempt_at,
    created_at)
VALUES (?, ?, ?, 'pending', 0, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND),
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))
