//! [`ConformanceSql`] for idem's backends (features `postgres` and `sqlite`): statements both
//! PostgreSQL and SQLite read alike (`$n` parameters work on both).

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use idem_store::sqlx;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use super::ConformanceSql;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! impl_conformance_sql {
    ($db:ty) => {
        impl ConformanceSql for $db {
            async fn history(
                pool: &sqlx::Pool<Self>,
            ) -> Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error> {
                sqlx::query_as(
                    "SELECT version, description, checksum FROM idem_schema_migrations \
                     ORDER BY version",
                )
                .fetch_all(pool)
                .await
            }

            async fn tamper_checksum(
                pool: &sqlx::Pool<Self>,
                version: i64,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("UPDATE idem_schema_migrations SET checksum = $1 WHERE version = $2")
                    .bind(vec![0_u8; 32])
                    .bind(version)
                    .execute(pool)
                    .await
                    .map(drop)
            }

            async fn record_unknown_migration(
                pool: &sqlx::Pool<Self>,
                version: i64,
                description: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "INSERT INTO idem_schema_migrations (version, description, checksum) \
                     VALUES ($1, $2, $3)",
                )
                .bind(version)
                .bind(description)
                .bind(vec![1_u8; 32])
                .execute(pool)
                .await
                .map(drop)
            }

            async fn corrupt_headers(
                pool: &sqlx::Pool<Self>,
                key: idem_store::KeyRef<'_>,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE idempotency_keys SET response_headers = 'not json' \
                     WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
                )
                .bind(key.scope)
                .bind(key.operation)
                .bind(key.key)
                .execute(pool)
                .await
                .map(drop)
            }

            async fn corrupt_payload(
                pool: &sqlx::Pool<Self>,
                dedup_id: &str,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(
                    "UPDATE idempotency_outbox SET payload = 'not json' WHERE dedup_id = $1",
                )
                .bind(dedup_id)
                .execute(pool)
                .await
                .map(drop)
            }
        }
    };
}

#[cfg(feature = "postgres")]
impl_conformance_sql!(sqlx::Postgres);
#[cfg(feature = "sqlite")]
impl_conformance_sql!(sqlx::Sqlite);
