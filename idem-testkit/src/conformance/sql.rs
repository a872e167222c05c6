//! [`ConformanceSql`] for idem's backends (features `postgres`, `sqlite` and `mysql`): the
//! same statements, their parameters numbered (`$n`) or, on MySQL, in order (`?`).

#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use idem_store::sqlx;

#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use super::ConformanceSql;

#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
macro_rules! impl_conformance_sql {
    ($db:ty, $p1:literal, $p2:literal, $p3:literal) => {
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
                sqlx::query(concat!(
                    "UPDATE idem_schema_migrations SET checksum = ",
                    $p1,
                    " WHERE version = ",
                    $p2
                ))
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
                sqlx::query(concat!(
                    "INSERT INTO idem_schema_migrations (version, description, checksum) \
                     VALUES (",
                    $p1,
                    ", ",
                    $p2,
                    ", ",
                    $p3,
                    ")"
                ))
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
                sqlx::query(concat!(
                    "UPDATE idempotency_keys SET response_headers = 'not json' WHERE scope = ",
                    $p1,
                    " AND operation = ",
                    $p2,
                    " AND idempotency_key = ",
                    $p3
                ))
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
                sqlx::query(concat!(
                    "UPDATE idempotency_outbox SET payload = 'not json' WHERE dedup_id = ",
                    $p1
                ))
                .bind(dedup_id)
                .execute(pool)
                .await
                .map(drop)
            }
        }
    };
}

#[cfg(feature = "postgres")]
impl_conformance_sql!(sqlx::Postgres, "$1", "$2", "$3");
#[cfg(feature = "sqlite")]
impl_conformance_sql!(sqlx::Sqlite, "$1", "$2", "$3");
#[cfg(feature = "mysql")]
impl_conformance_sql!(sqlx::MySql, "?", "?", "?");
