INSERT INTO idempotency_inbox (source, event_id, status, reason, body, deliveries, first_seen_at,
    last_seen_at)
VALUES ($1, $2, $3, $4, $5, 1, to_timestamp(($6)::float8 / 1000), to_timestamp(($7)::float8 /
    1000))
ON CONFLICT (source, event_id) DO UPDATE SET status = CASE WHEN idempotency_inbox.status =
    'unmatched' THEN 'unmatched' ELSE excluded.status END, reason = excluded.reason, body = CASE
    WHEN idempotency_inbox.status = 'unparseable' AND excluded.status <> 'unparseable' THEN
    excluded.body ELSE idempotency_inbox.body END, deliveries = idempotency_inbox.deliveries + 1,
    last_seen_at = excluded.last_seen_at
