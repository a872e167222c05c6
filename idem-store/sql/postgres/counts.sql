SELECT operation, CASE WHEN status = 'completed' AND expires_at <= to_timestamp(($1)::float8 / 1000)
    THEN 'expired' WHEN status = 'processing' AND locked_until <= to_timestamp(($2)::float8 / 1000)
    THEN 'stuck' ELSE status END AS state, count(*), (extract(epoch FROM min(created_at)) *
    1000)::int8
FROM idempotency_keys
GROUP BY 1, 2
