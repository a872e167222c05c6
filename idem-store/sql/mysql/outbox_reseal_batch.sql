SELECT id, dedup_id, topic, payload FROM idempotency_outbox WHERE id > ? ORDER BY id LIMIT ?
