DELETE FROM idempotency_outbox
WHERE id IN (SELECT id FROM idempotency_outbox WHERE status = 'delivered' AND delivered_at <=
    strftime('%Y-%m-%d %H:%M:%f', $1 / 1000.0, 'unixepoch') LIMIT $2)
