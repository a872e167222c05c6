UPDATE idempotency_keys
SET expires_at = to_timestamp(($1)::float8 / 1000)
WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND (extract(epoch FROM expires_at) *
    1000)::int8 > $5
RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, response_headers,
    response_body, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM completed_at)
    * 1000)::int8, (extract(epoch FROM expires_at) * 1000)::int8, (extract(epoch FROM locked_until)
    * 1000)::int8, attempt, recovery_point, reservation
