SELECT operation, scope, ttl_ms, mode, lease_ms, doc, CAST(round(unixepoch(registered_at, 'auto',
    'subsec') * 1000) AS INTEGER)
FROM idempotency_operations
ORDER BY operation
