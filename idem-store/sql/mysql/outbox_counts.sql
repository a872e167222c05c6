SELECT status, count(*), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', min(created_at)) DIV 1000),
    count(CASE WHEN locked_until > DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) THEN 1
    END)
FROM idempotency_outbox
GROUP BY status
