SELECT pg_total_relation_size(to_regclass('idempotency_keys'))
