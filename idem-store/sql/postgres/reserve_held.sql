WITH held AS (SELECT pg_try_advisory_lock($11) AS ok FROM (SELECT pg_advisory_unlock_all()) AS
    released), reserved AS (INSERT INTO idempotency_keys (scope, operation, idempotency_key,
    fingerprint, status, request, created_at, expires_at, locked_until, attempt, reservation,
    field_digests) SELECT $1, $2, $3,
    $4, 'processing', $5, to_timestamp(($6)::float8 / 1000), to_timestamp(($7)::float8 / 1000),
    to_timestamp(($8)::float8 / 1000), 1, $9, $10 FROM held WHERE held.ok ON CONFLICT (scope, operation,
    idempotency_key) DO NOTHING RETURNING scope, operation, idempotency_key), processing AS (INSERT
    INTO idempotency_processing (scope, operation, idempotency_key) SELECT scope, operation,
    idempotency_key FROM reserved ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET
    scope = excluded.scope RETURNING 1) SELECT (SELECT ok FROM held), (SELECT count(*) FROM
    processing)
