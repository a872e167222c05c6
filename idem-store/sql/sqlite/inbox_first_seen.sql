SELECT CAST(round(unixepoch(first_seen_at, 'auto', 'subsec') * 1000) AS INTEGER)
FROM idempotency_inbox
WHERE source = $1 AND event_id = $2
