INSERT INTO idem_schema_migrations (version, description, checksum)
VALUES (?, ?, ?)
