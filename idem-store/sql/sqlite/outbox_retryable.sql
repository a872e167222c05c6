SELECT id
FROM idempotency_outbox
WHERE id > $1 AND (status = 'dead' OR (status = 'pending' AND next_attempt_at >
    strftime('%Y-%m-%d %H:%M:%f', $2 / 1000.0, 'unixepoch') AND (locked_until IS NULL OR
    locked_until <= strftime('%Y-%m-%d %H:%M:%f', $3 / 1000.0, 'unixepoch'))))
ORDER BY id LIMIT $4
