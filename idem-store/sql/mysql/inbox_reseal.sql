UPDATE idempotency_inbox SET body = ? WHERE id = ?
