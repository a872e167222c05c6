UPDATE idempotency_outbox
SET locked_until = to_timestamp(($2)::float8 / 1000)
WHERE id = ANY(ARRAY(SELECT id FROM idempotency_outbox WHERE status = 'pending' AND next_attempt_at
    <= to_timestamp(($1)::float8 / 1000) AND (locked_until IS NULL OR locked_until <=
    to_timestamp(($1)::float8 / 1000)) ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED))
RETURNING id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM next_attempt_at) *
    1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, last_error, (extract(epoch FROM
    created_at) * 1000)::int8, (extract(epoch FROM delivered_at) * 1000)::int8
