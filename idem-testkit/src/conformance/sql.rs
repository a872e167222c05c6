//! [`ConformanceSql`], and its statements on idem's backends (features `postgres`, `sqlite`
//! and `mysql`): the same statements, their parameters numbered (`$n`) or, on MySQL, in
//! order (`?`). [`LockWaits`], what each store says of a session's lock waits, which differs
//! from store to store: one implementation each.

use std::future::Future;

use idem_store::KeyRef;
use idem_store::sqlx::{self, Database, Pool};

use crate::harness::TestBackend;

/// The few statements the kit runs on a backend beside the store's API: reading the
/// migration history and spoiling rows on purpose (a tampered checksum, headers or a payload
/// that is not JSON), to check how the store answers them.
///
/// Implemented for every store idem supports, each with this crate's feature of the store's
/// name, as is its supertrait [`LockWaits`].
pub trait ConformanceSql: LockWaits {
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

/// What the store itself says of a session's lock waits: how a case knows that a concurrent
/// step is blocked on a lock — asked of the server, not guessed from the time that passed.
///
/// Each store's statements differ (and SQLite has no server to ask): one implementation per
/// store, with this crate's feature of the store's name.
pub trait LockWaits: TestBackend {
    /// The server session `conn` is on, as [`LockWaits::waits_for_lock`] names it
    /// (PostgreSQL: `pg_backend_pid()`; MySQL: `CONNECTION_ID()`); `None` where there is no
    /// server session to ask about (SQLite, in process). Read it on `conn` before the step
    /// that may wait, which then holds `conn`. (Not through a transaction pooler, which the
    /// kit does not run through: there the next transaction may run on another session.)
    fn session(
        conn: &mut <Self as Database>::Connection,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send;

    /// Whether the server reports session `session` ([`LockWaits::session`]) blocked now,
    /// waiting for a lock another session holds, asked on a connection of `pool`
    /// (PostgreSQL: `pg_stat_activity`'s `wait_event_type = 'Lock'` and
    /// `pg_blocking_pids`; MySQL: InnoDB's transaction of that connection in `LOCK WAIT`).
    fn waits_for_lock(
        pool: &Pool<Self>,
        session: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
}

#[cfg(feature = "postgres")]
impl LockWaits for sqlx::Postgres {
    async fn session(conn: &mut sqlx::PgConnection) -> Result<Option<i64>, sqlx::Error> {
        sqlx::query_scalar("SELECT pg_backend_pid()::int8")
            .fetch_one(conn)
            .await
            .map(Some)
    }

    /// The backend's wait is a heavyweight lock's (idem's key locks are advisory locks, one
    /// kind of them) and another backend holds that lock.
    async fn waits_for_lock(pool: &sqlx::PgPool, session: i64) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 \
             AND wait_event_type = 'Lock' AND cardinality(pg_blocking_pids(pid)) > 0",
        )
        .bind(session)
        .fetch_one(pool)
        .await
    }
}

#[cfg(feature = "sqlite")]
impl LockWaits for sqlx::Sqlite {
    /// None: SQLite runs in process, its lock waits in the connection's busy handler, with no
    /// session another connection could ask about.
    async fn session(_conn: &mut sqlx::SqliteConnection) -> Result<Option<i64>, sqlx::Error> {
        Ok(None)
    }

    /// Never asked ([`LockWaits::session`] names no session): `false`.
    async fn waits_for_lock(_pool: &sqlx::SqlitePool, _session: i64) -> Result<bool, sqlx::Error> {
        Ok(false)
    }
}

/// How long [`LockWaits::waits_for_lock`] leaves `information_schema.INNODB_TRX` unread
/// before it reads it on MySQL: more than the 0.1 s after which a read refreshes it.
#[cfg(feature = "mysql")]
const INNODB_TRX_REFRESH: std::time::Duration = std::time::Duration::from_millis(150);

#[cfg(feature = "mysql")]
impl LockWaits for sqlx::MySql {
    async fn session(conn: &mut sqlx::MySqlConnection) -> Result<Option<i64>, sqlx::Error> {
        sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
            .fetch_one(conn)
            .await
            .map(Some)
    }

    /// InnoDB's own view (`information_schema.INNODB_TRX`, on MySQL 8 and MariaDB alike): the
    /// connection's transaction waits for a row lock (idem's key lock is the row of
    /// `idempotency_locks`).
    ///
    /// InnoDB answers from a cache that a read refreshes only when the previous read is more
    /// than 0.1 s old (`CACHE_MIN_IDLE_TIME` in InnoDB's `trx0i_s.cc`): polled more often, it
    /// shows the same old rows forever (sessions long gone waiting, a waiting one absent). So
    /// this waits longer than that first; another reader of that table at the same time, in
    /// another process, can still keep the rows old.
    async fn waits_for_lock(pool: &sqlx::MySqlPool, session: i64) -> Result<bool, sqlx::Error> {
        tokio::time::sleep(INNODB_TRX_REFRESH).await;
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.INNODB_TRX \
             WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'",
        )
        .bind(session)
        .fetch_one(pool)
        .await?;
        Ok(waiting > 0)
    }
}
