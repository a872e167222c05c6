SELECT id, source, event_id, status, reason, body, deliveries, (extract(epoch FROM first_seen_at) *
    1000)::int8, (extract(epoch FROM last_seen_at) * 1000)::int8
FROM idempotency_inbox
WHERE status = $1
ORDER BY first_seen_at, id LIMIT $2
