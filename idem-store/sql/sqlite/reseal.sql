UPDATE idempotency_keys
SET fingerprint = $1, field_digests = $2, request = $3, journal = $4, response_headers = $5,
    response_body = $6
WHERE scope = $7 AND operation = $8 AND idempotency_key = $9
