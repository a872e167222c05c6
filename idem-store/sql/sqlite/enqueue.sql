INSERT INTO idempotency_outbox (dedup_id, topic, payload, status, attempts, next_attempt_at,
    created_at)
VALUES ($1, $2, $3, 'pending', 0, strftime('%Y-%m-%d %H:%M:%f', $4 / 1000.0, 'unixepoch'),
    strftime('%Y-%m-%d %H:%M:%f', $5 / 1000.0, 'unixepoch'))
ON CONFLICT (dedup_id) DO NOTHING
