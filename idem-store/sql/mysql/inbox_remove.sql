DELETE FROM idempotency_inbox
WHERE source = ? AND event_id = ?
