//! [`ConformanceSql`], and its statements on idem's backends (features `postgres`, `sqlite`
//! and `mysql`): the same statements, their parameters numbered (`$n`) or, on MySQL, in
//! order (`?`).

use std::future::Future;

use idem_store::KeyRef;
use idem_store::sqlx::{self, Pool};

use crate::harness::TestBackend;

/// The few statements the kit runs on a backend beside the store's API: reading the
/// migration history and spoiling rows on purpose (a tampered checksum, headers or a payload
/// that is not JSON), to check how the store answers them.
///
/// Implemented for every store idem supports, each with this crate's feature of the store's
/// name.
pub trait ConformanceSql: TestBackend {
    /// `idem_schema_migrations` in version order: (version, description, checksum).
    fn history(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error>> + Send;

    /// Overwrites the recorded checksum of migration `version` with 32 zero bytes.
    fn tamper_checksum(
        pool: &Pool<Self>,
        version: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Records migration `version` as a newer version of idem would have applied it (a
    /// version this one does not know), with `description`.
    fn record_unknown_migration(
        pool: &Pool<Self>,
        version: i64,
        description: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Sets the `response_headers` of `key`'s row to text that is not JSON.
    fn corrupt_headers(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Sets the payload of the outbox message `dedup_id` to text that is not JSON.
    fn corrupt_payload(
        pool: &Pool<Self>,
        dedup_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

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
