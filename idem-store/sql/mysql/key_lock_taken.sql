SELECT lock_id FROM idempotency_locks WHERE lock_id = ? FOR UPDATE NOWAIT
