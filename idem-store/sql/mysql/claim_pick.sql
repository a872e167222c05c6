SELECT id
FROM idempotency_outbox
WHERE status = 'pending' AND next_attempt_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000)
    MICROSECOND) AND (locked_until IS NULL OR locked_until <= DATE_ADD('1970-01-01', INTERVAL ((?) *
    1000) MICROSECOND))
ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED
