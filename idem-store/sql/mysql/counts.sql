SELECT operation, CASE WHEN status = 'completed' AND expires_at <= DATE_ADD('1970-01-01', INTERVAL
    ((?) * 1000) MICROSECOND) THEN 'expired' WHEN status = 'processing' AND locked_until <=
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) THEN 'stuck' ELSE status END AS state,
    count(*), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', min(created_at)) DIV 1000)
FROM idempotency_keys
GROUP BY 1, 2
