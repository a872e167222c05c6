SELECT (extract(epoch FROM first_seen_at) * 1000)::int8
FROM idempotency_inbox
WHERE source = $1 AND event_id = $2
