INSERT INTO idempotency_operations (operation, scope, ttl_ms, mode, lease_ms, doc, registered_at)
VALUES (?, ?, ?, ?, ?, ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))
ON DUPLICATE KEY UPDATE scope = VALUES(scope), ttl_ms = VALUES(ttl_ms), mode = VALUES(mode),
    lease_ms = VALUES(lease_ms), doc = VALUES(doc), registered_at = VALUES(registered_at)
