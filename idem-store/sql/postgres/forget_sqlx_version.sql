DELETE FROM _sqlx_migrations
WHERE version = $1
