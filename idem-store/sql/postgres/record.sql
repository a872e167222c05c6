INSERT INTO idem_schema_migrations (version, description, checksum)
VALUES ($1, $2, $3)
