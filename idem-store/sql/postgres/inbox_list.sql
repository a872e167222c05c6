SELECT id, source, event_id, status, reason, body, deliveries, (extract(epoch FROM first_seen_at) *
    1000)::int8, (extract(epoch FROM last_seen_at) * 1000)::int8
FROM idempotency_inbox
ORDER BY first_seen_at, id LIMIT $1
