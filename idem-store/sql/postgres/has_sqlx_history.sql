SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
    WHERE schemaname = current_schema() AND tablename = '_sqlx_migrations')
