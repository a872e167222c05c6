SELECT operation, scope, ttl_ms, mode, lease_ms, doc, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01',
    registered_at) DIV 1000)
FROM idempotency_operations
ORDER BY operation
