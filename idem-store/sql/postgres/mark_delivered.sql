UPDATE idempotency_outbox
SET status = 'delivered', delivered_at = to_timestamp(($1)::float8 / 1000), locked_until = NULL
WHERE id = $2 AND status = 'pending'
