UPDATE idempotency_outbox
SET status = 'pending', attempts = $1, next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', $2 / 1000.0,
    'unixepoch'), locked_until = NULL
WHERE id = $3
RETURNING id, dedup_id, topic, payload, status, attempts, CAST(round(unixepoch(next_attempt_at,
    'auto', 'subsec') * 1000) AS INTEGER), CAST(round(unixepoch(locked_until, 'auto', 'subsec') *
    1000) AS INTEGER), last_error, CAST(round(unixepoch(created_at, 'auto', 'subsec') * 1000) AS
    INTEGER), CAST(round(unixepoch(delivered_at, 'auto', 'subsec') * 1000) AS INTEGER)
