SELECT operation, CASE WHEN status = 'completed' AND CAST(round(unixepoch(expires_at, 'auto',
    'subsec') * 1000) AS INTEGER) <= $1 THEN 'expired' WHEN status = 'processing' AND
    CAST(round(unixepoch(locked_until, 'auto', 'subsec') * 1000) AS INTEGER) <= $2 THEN 'stuck' ELSE
    status END AS state, count(*), CAST(round(unixepoch(min(created_at), 'auto', 'subsec') * 1000)
    AS INTEGER)
FROM idempotency_keys
GROUP BY 1, 2
