SELECT scope, operation, idempotency_key, fingerprint, status, response_status, response_headers,
    response_body, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM completed_at)
    * 1000)::int8, (extract(epoch FROM expires_at) * 1000)::int8, (extract(epoch FROM locked_until)
    * 1000)::int8, attempt, recovery_point, reservation
FROM idempotency_keys
WHERE 1 = 1
