SELECT id, dedup_id, topic, payload FROM idempotency_outbox WHERE id > $1 ORDER BY id LIMIT $2
