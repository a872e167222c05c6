UPDATE idempotency_outbox SET payload = $1 WHERE id = $2
