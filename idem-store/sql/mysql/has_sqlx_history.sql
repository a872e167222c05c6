SELECT EXISTS (SELECT 1 FROM information_schema.tables
    WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations') = 1
