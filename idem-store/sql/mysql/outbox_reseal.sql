UPDATE idempotency_outbox SET payload = ? WHERE id = ?
