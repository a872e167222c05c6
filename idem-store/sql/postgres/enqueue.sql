INSERT INTO idempotency_outbox (dedup_id, topic, payload, status, attempts, next_attempt_at,
    created_at)
VALUES ($1, $2, $3, 'pending', 0, to_timestamp(($4)::float8 / 1000), to_timestamp(($5)::float8 /
    1000))
ON CONFLICT (dedup_id) DO NOTHING
