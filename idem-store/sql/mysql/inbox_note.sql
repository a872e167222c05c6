INSERT INTO idempotency_inbox (source, event_id, status, reason, body, deliveries, first_seen_at,
    last_seen_at)
VALUES (?, ?, ?, ?, ?, 1, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND),
    DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))
ON DUPLICATE KEY UPDATE body = IF(status = 'unparseable' AND VALUES(status) <> 'unparseable',
    VALUES(body), body), status = IF(status = 'unmatched', 'unmatched', VALUES(status)), reason =
    VALUES(reason), deliveries = deliveries + 1, last_seen_at = VALUES(last_seen_at)
