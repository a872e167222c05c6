SELECT id
FROM idempotency_outbox
WHERE id > $1 AND (status = 'dead' OR (status = 'pending' AND next_attempt_at >
    to_timestamp(($2)::float8 / 1000) AND (locked_until IS NULL OR locked_until <=
    to_timestamp(($3)::float8 / 1000))))
ORDER BY id LIMIT $4
