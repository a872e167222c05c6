UPDATE idempotency_keys
SET status = 'completed', response_status = $1, response_headers = $2, response_body = $3,
    completed_at = to_timestamp(($4)::float8 / 1000), expires_at = to_timestamp(($5 +
    COALESCE((SELECT ttl_ms FROM idempotency_operations WHERE operation = $6),
    GREATEST((extract(epoch FROM expires_at) * 1000)::int8 - (extract(epoch FROM created_at) *
    1000)::int8, 0)))::float8 / 1000), locked_until = NULL, attempt = attempt + 1
WHERE scope = $7 AND operation = $8 AND idempotency_key = $9
RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, response_headers,
    response_body, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM completed_at)
    * 1000)::int8, (extract(epoch FROM expires_at) * 1000)::int8, (extract(epoch FROM locked_until)
    * 1000)::int8, attempt, recovery_point, reservation
