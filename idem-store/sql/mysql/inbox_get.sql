SELECT id, source, event_id, status, reason, body, deliveries, (TIMESTAMPDIFF(MICROSECOND,
    '1970-01-01', first_seen_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01',
    last_seen_at) DIV 1000)
FROM idempotency_inbox
WHERE event_id = ?
ORDER BY source
