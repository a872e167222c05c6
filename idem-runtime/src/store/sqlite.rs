//! SQLite: the embedded default, for one process.
//!
//! Timestamps are UTC text `YYYY-MM-DD HH:MM:SS.SSS`, the format of SQLite's own date
//! functions. Transactions start with `BEGIN IMMEDIATE`, so a request takes the write lock
//! before it reserves its key; lock waits are bounded by `busy_timeout`.

use std::str::FromStr;

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Pool, Sqlite, Transaction};

use super::{Backend, Failure, KeyRef, Record, StoredKey, TxSettings, sealed};

mod sql {
    // `expires_at` in milliseconds. idem writes text timestamps; a plain number an operator
    // wrote by hand (stored as text: the column has text affinity) is read as Unix seconds.
    macro_rules! expires_ms {
        ($column:literal) => {
            concat!(
                "(CASE WHEN CAST(",
                $column,
                " AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(",
                $column,
                " AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(",
                $column,
                ") - 2440587.5) * 86400000.0) AS INTEGER) END)"
            )
        };
    }

    pub const LOOKUP: &str = concat!(
        "SELECT fingerprint, status, response_status, response_headers, response_body, ",
        expires_ms!("expires_at"),
        " AS expires_at_ms \
         FROM idempotency_keys WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3"
    );

    pub const RESERVE: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, created_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, 'processing', \
         strftime('%Y-%m-%d %H:%M:%f', ?5 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?6 / 1000.0, 'unixepoch')) \
         ON CONFLICT (scope, operation, idempotency_key) DO NOTHING";

    pub const RESERVE_OR_REPLACE_EXPIRED: &str = concat!(
        "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, created_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, 'processing', \
         strftime('%Y-%m-%d %H:%M:%f', ?5 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?6 / 1000.0, 'unixepoch')) \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET \
         fingerprint = excluded.fingerprint, status = 'processing', response_status = NULL, \
         response_headers = NULL, response_body = NULL, created_at = excluded.created_at, \
         completed_at = NULL, expires_at = excluded.expires_at WHERE ",
        expires_ms!("idempotency_keys.expires_at"),
        " <= ?5"
    );

    pub const COMPLETE: &str = "UPDATE idempotency_keys SET status = 'completed', \
         response_status = ?4, response_headers = ?5, response_body = ?6, \
         completed_at = strftime('%Y-%m-%d %H:%M:%f', ?7 / 1000.0, 'unixepoch') \
         WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3";

    pub const SWEEP: &str = "DELETE FROM idempotency_keys \
         WHERE (scope, operation, idempotency_key) IN (\
         SELECT scope, operation, idempotency_key FROM idempotency_keys \
         WHERE expires_at <= strftime('%Y-%m-%d %H:%M:%f', ?1 / 1000.0, 'unixepoch') LIMIT ?2)";
}

impl sealed::Sealed for Sqlite {}

impl Backend for Sqlite {
    fn migrator() -> sqlx::migrate::Migrator {
        let mut migrator = sqlx::migrate!("../migrations/sqlite");
        // Applications keep their own migrations in the same database.
        migrator.set_ignore_missing(true);
        migrator
    }

    async fn connect(
        url: &str,
        max_connections: u32,
        settings: &TxSettings,
    ) -> Result<Pool<Self>, sqlx::Error> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(settings.lock_timeout);
        SqlitePoolOptions::new()
            .max_connections(max_connections)
            .test_before_acquire(false)
            .connect_with(options)
            .await
    }

    async fn begin(
        conn: PoolConnection<Self>,
        _settings: &TxSettings,
    ) -> Result<Transaction<'static, Self>, sqlx::Error> {
        Transaction::begin(conn, Some("BEGIN IMMEDIATE".into())).await
    }

    super::impl_backend_queries!();

    fn classify(error: &sqlx::Error) -> Failure {
        let Some(db) = error.as_database_error() else {
            return Failure::Other;
        };
        // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
        let busy = db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6));
        if busy || db.message().contains("database is locked") {
            Failure::LockTimeout
        } else {
            Failure::Other
        }
    }
}
