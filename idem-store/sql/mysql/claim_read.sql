SELECT id, dedup_id, topic, payload, status, attempts, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01',
    next_attempt_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', locked_until) DIV 1000),
    last_error, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) DIV 1000),
    (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at) DIV 1000)
FROM idempotency_outbox
WHERE id IN (
