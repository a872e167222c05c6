UPDATE idempotency_outbox
SET status = 'pending', attempts = $1, next_attempt_at = to_timestamp(($2)::float8 / 1000),
    locked_until = NULL
WHERE id = $3
RETURNING id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM next_attempt_at) *
    1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, last_error, (extract(epoch FROM
    created_at) * 1000)::int8, (extract(epoch FROM delivered_at) * 1000)::int8
