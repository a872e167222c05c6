SELECT id, source, event_id, status, reason, body, deliveries, CAST(round(unixepoch(first_seen_at,
    'auto', 'subsec') * 1000) AS INTEGER), CAST(round(unixepoch(last_seen_at, 'auto', 'subsec') *
    1000) AS INTEGER)
FROM idempotency_inbox
WHERE status = $1
ORDER BY first_seen_at, id LIMIT $2
