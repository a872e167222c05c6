UPDATE idempotency_outbox
SET locked_until = strftime('%Y-%m-%d %H:%M:%f', $2 / 1000.0, 'unixepoch')
WHERE id IN (SELECT id FROM idempotency_outbox WHERE status = 'pending' AND next_attempt_at <=
    strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch') AND (locked_until IS NULL OR
    locked_until <= strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch')) ORDER BY id LIMIT $3)
RETURNING id, dedup_id, topic, payload, status, attempts, CAST(round(unixepoch(next_attempt_at,
    'auto', 'subsec') * 1000) AS INTEGER), CAST(round(unixepoch(locked_until, 'auto', 'subsec') *
    1000) AS INTEGER), last_error, CAST(round(unixepoch(created_at, 'auto', 'subsec') * 1000) AS
    INTEGER), CAST(round(unixepoch(delivered_at, 'auto', 'subsec') * 1000) AS INTEGER)
