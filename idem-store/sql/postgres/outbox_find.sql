SELECT id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM next_attempt_at) *
    1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, last_error, (extract(epoch FROM
    created_at) * 1000)::int8, (extract(epoch FROM delivered_at) * 1000)::int8
FROM idempotency_outbox
WHERE id = $1
