SELECT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', first_seen_at) DIV 1000)
FROM idempotency_inbox
WHERE source = ? AND event_id = ?
