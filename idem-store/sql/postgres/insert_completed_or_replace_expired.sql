INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status,
    response_status, response_headers, response_body, created_at, completed_at, expires_at,
    field_digests)
VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp(($8)::float8 / 1000),
    to_timestamp(($9)::float8 / 1000), to_timestamp(($10)::float8 / 1000), $11)
ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET fingerprint = excluded.fingerprint,
    status = 'completed', response_status = excluded.response_status, response_headers =
    excluded.response_headers, response_body = excluded.response_body, created_at =
    excluded.created_at, completed_at = excluded.completed_at, expires_at = excluded.expires_at,
    field_digests = excluded.field_digests
WHERE idempotency_keys.status = 'completed' AND idempotency_keys.expires_at <=
    to_timestamp(($8)::float8 / 1000)
