SELECT id, dedup_id, topic, payload, status, attempts, CAST(round(unixepoch(next_attempt_at, 'auto',
    'subsec') * 1000) AS INTEGER), CAST(round(unixepoch(locked_until, 'auto', 'subsec') * 1000) AS
    INTEGER), last_error, CAST(round(unixepoch(created_at, 'auto', 'subsec') * 1000) AS INTEGER),
    CAST(round(unixepoch(delivered_at, 'auto', 'subsec') * 1000) AS INTEGER)
FROM idempotency_outbox
WHERE id = $1
