//! [`ConformanceSql`], the statements the kit runs beside the store's API, written once for
//! every store; [`LockWaits`], what each store says of a session's lock waits, which differs
//! from store to store: one implementation each.

use std::future::Future;

use idem_store::sqlx::{self, Database, Pool};
use idem_store::{Arg, Backend, KeyRef};

use crate::harness::TestBackend;

/// The few statements the kit runs on a backend beside the store's API: reading the
/// migration history and spoiling rows on purpose (a tampered checksum, headers or a payload
/// that is not JSON), to check how the store answers them. Written once, through the store's
/// own statement calls; every store with this crate's feature of its name has them.
pub trait ConformanceSql: LockWaits {
    /// `idem_schema_migrations` in version order: (version, description, checksum).
    fn history(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error>> + Send {
        async move {
            let mut conn = pool.acquire().await?;
            let sql = "SELECT version, description, checksum FROM idem_schema_migrations \
                       ORDER BY version";
            let rows = Self::fetch_all(&mut conn, sql, &[]).await?;
            (rows.iter())
                .map(|row| {
                    Ok((
                        Self::int(row, 0)?,
                        Self::text(row, 1)?,
                        Self::bytes(row, 2)?,
                    ))
                })
                .collect()
        }
    }

    /// Overwrites the recorded checksum of migration `version` with 32 zero bytes.
    fn tamper_checksum(
        pool: &Pool<Self>,
        version: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let sql = "UPDATE idem_schema_migrations SET checksum = $1 WHERE version = $2";
        run(pool, sql, [Arg::Bytes(&[0; 32]), Arg::Int(version)])
    }

    /// Records migration `version` as a newer version of idem would have applied it (a
    /// version this one does not know), with `description`.
    fn record_unknown_migration(
        pool: &Pool<Self>,
        version: i64,
        description: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let sql = "INSERT INTO idem_schema_migrations (version, description, checksum) \
                   VALUES ($1, $2, $3)";
        let args = [
            Arg::Int(version),
            Arg::Text(description),
            Arg::Bytes(&[1; 32]),
        ];
        run(pool, sql, args)
    }

    /// Sets the `response_headers` of `key`'s row to text that is not JSON.
    fn corrupt_headers(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let sql = "UPDATE idempotency_keys SET response_headers = 'not json' \
                   WHERE scope = $1 AND operation = $2 AND idempotency_key = $3";
        let args = [
            Arg::Text(key.scope),
            Arg::Text(key.operation),
            Arg::Text(key.key),
        ];
        run(pool, sql, args)
    }

    /// Sets the `response_headers` of `key`'s row to `headers` (`None`: NULL), behind idem's
    /// back: a sealed row's marker changed by hand.
    fn set_response_headers<'a>(
        pool: &'a Pool<Self>,
        key: KeyRef<'a>,
        headers: Option<&'a str>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a {
        let sql = "UPDATE idempotency_keys SET response_headers = $1 \
                   WHERE scope = $2 AND operation = $3 AND idempotency_key = $4";
        let args = [
            Arg::OptText(headers),
            Arg::Text(key.scope),
            Arg::Text(key.operation),
            Arg::Text(key.key),
        ];
        run(pool, sql, args)
    }

    /// Sets the payload of the outbox message `dedup_id` to text that is not JSON.
    fn corrupt_payload(
        pool: &Pool<Self>,
        dedup_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let sql = "UPDATE idempotency_outbox SET payload = 'not json' WHERE dedup_id = $1";
        run(pool, sql, [Arg::Text(dedup_id)])
    }
}

impl<DB: LockWaits> ConformanceSql for DB {}

/// Runs `sql` with `args` on `pool`, its parameters `$1`, `$2`, … written as the store's
/// (`?` on MySQL, where they are taken in order, as they are here).
async fn run<DB: Backend, const N: usize>(
    pool: &Pool<DB>,
    sql: &str,
    args: [Arg<'_>; N],
) -> Result<(), sqlx::Error> {
    let sql = if DB::DIALECT.positional {
        (1..=N).fold(sql.to_owned(), |sql, n| sql.replace(&format!("${n}"), "?"))
    } else {
        sql.to_owned()
    };
    let mut conn = pool.acquire().await?;
    DB::execute(&mut conn, &sql, &args).await.map(drop)
}

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
