SELECT id, source, event_id, body FROM idempotency_inbox WHERE id > $1 ORDER BY id LIMIT $2
