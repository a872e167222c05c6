SELECT status, count(*), (extract(epoch FROM min(created_at)) * 1000)::int8, count(CASE WHEN
    locked_until > to_timestamp(($1)::float8 / 1000) THEN 1 END)
FROM idempotency_outbox
GROUP BY status
