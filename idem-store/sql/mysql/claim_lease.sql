UPDATE idempotency_outbox
SET locked_until = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)
WHERE id IN (
