UPDATE idempotency_inbox SET body = $1 WHERE id = $2
