UPDATE idempotency_keys
SET fingerprint = ?, field_digests = ?, request = ?, journal = ?, response_headers = ?,
    response_body = ?
WHERE scope = ? AND operation = ? AND idempotency_key = ?
