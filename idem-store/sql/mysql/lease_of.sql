SELECT attempt, journal, request, fingerprint
FROM idempotency_keys
WHERE scope = ? AND operation = ? AND idempotency_key = ?
