INSERT INTO idempotency_operations (operation, scope, ttl_ms, mode, lease_ms, doc, registered_at)
VALUES ($1, $2, $3, $4, $5, $6, strftime('%Y-%m-%d %H:%M:%f', $7 / 1000.0, 'unixepoch'))
ON CONFLICT (operation) DO UPDATE SET scope = excluded.scope, ttl_ms = excluded.ttl_ms, mode =
    excluded.mode, lease_ms = excluded.lease_ms, doc = excluded.doc, registered_at =
    excluded.registered_at
