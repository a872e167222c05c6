SELECT status, count(*), CAST(round(unixepoch(min(created_at), 'auto', 'subsec') * 1000) AS
    INTEGER), count(CASE WHEN locked_until > strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch')
    THEN 1 END)
FROM idempotency_outbox
GROUP BY status
