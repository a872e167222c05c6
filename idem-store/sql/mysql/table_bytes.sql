SELECT CAST(data_length + index_length AS SIGNED)
FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys'
