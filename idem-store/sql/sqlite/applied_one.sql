SELECT checksum
FROM idem_schema_migrations
WHERE version = $1
