INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status,
    response_status, response_headers, response_body, created_at, completed_at, expires_at,
    field_digests)
VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp(($8)::float8 / 1000),
    to_timestamp(($9)::float8 / 1000), to_timestamp(($10)::float8 / 1000), $11)
ON CONFLICT (scope, operation, idempotency_key) DO NOTHING
