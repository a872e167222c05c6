SELECT operation, scope, ttl_ms, mode, lease_ms, doc, (extract(epoch FROM registered_at) *
    1000)::int8
FROM idempotency_operations
ORDER BY operation
