DELETE FROM idempotency_keys
WHERE ctid = ANY(ARRAY(SELECT ctid FROM idempotency_keys WHERE status = 'completed' AND expires_at
    <= to_timestamp(($1)::float8 / 1000) LIMIT $2 FOR UPDATE SKIP LOCKED))
