SELECT id, source, event_id, body FROM idempotency_inbox WHERE id > ? ORDER BY id LIMIT ?
