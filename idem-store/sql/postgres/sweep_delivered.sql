DELETE FROM idempotency_outbox
WHERE id = ANY(ARRAY(SELECT id FROM idempotency_outbox WHERE status = 'delivered' AND delivered_at
    <= to_timestamp(($1)::float8 / 1000) LIMIT $2 FOR UPDATE SKIP LOCKED))
