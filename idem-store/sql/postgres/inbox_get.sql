SELECT id, source, event_id, status, reason, body, deliveries, (extract(epoch FROM first_seen_at) *
    1000)::int8, (extract(epoch FROM last_seen_at) * 1000)::int8
FROM idempotency_inbox
WHERE event_id = $1
ORDER BY source
