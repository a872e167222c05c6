DELETE FROM idempotency_inbox
WHERE source = $1 AND event_id = $2
