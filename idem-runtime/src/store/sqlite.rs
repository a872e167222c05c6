//! SQLite: the embedded default, for one process.
//!
//! Timestamps are UTC text `YYYY-MM-DD HH:MM:SS.SSS`, the format of SQLite's own date
//! functions. Transactions start with `BEGIN IMMEDIATE`: an execution holds the write lock, and
//! with it its key, from its first statement on; lock waits are bounded by `busy_timeout`.

use std::str::FromStr;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Pool, Sqlite, Transaction};

use super::{Backend, Failure, KeyLock, KeyRef, NewRow, Record, StoredKey, TxSettings, sealed};

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

    /// The completed row, inserted once the handler has run; nothing if the key exists.
    pub const STORE: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, response_status, \
         response_headers, response_body, created_at, completed_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, 'completed', ?5, ?6, ?7, \
         strftime('%Y-%m-%d %H:%M:%f', ?8 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?9 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?10 / 1000.0, 'unixepoch')) \
         ON CONFLICT (scope, operation, idempotency_key) DO NOTHING";

    /// The same, overwriting a row that had expired when the execution began.
    pub const STORE_OR_REPLACE_EXPIRED: &str = concat!(
        "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, response_status, \
         response_headers, response_body, created_at, completed_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, 'completed', ?5, ?6, ?7, \
         strftime('%Y-%m-%d %H:%M:%f', ?8 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?9 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?10 / 1000.0, 'unixepoch')) \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET \
         fingerprint = excluded.fingerprint, status = 'completed', \
         response_status = excluded.response_status, \
         response_headers = excluded.response_headers, \
         response_body = excluded.response_body, created_at = excluded.created_at, \
         completed_at = excluded.completed_at, expires_at = excluded.expires_at WHERE ",
        expires_ms!("idempotency_keys.expires_at"),
        " <= ?8"
    );

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

    async fn begin<'c>(
        conn: &'c mut SqliteConnection,
        _settings: &TxSettings,
        _lock: Option<KeyLock<'_>>,
    ) -> Result<Transaction<'c, Self>, sqlx::Error> {
        // The write lock, taken now rather than at the first write: it is the key's lock.
        Transaction::begin(conn, Some("BEGIN IMMEDIATE".into())).await
    }

    async fn namespace(_conn: &mut SqliteConnection) -> Result<String, sqlx::Error> {
        // One database file, one key table, one write lock: nothing to tell apart.
        Ok(String::new())
    }

    async fn abandon_begin(_conn: &mut SqliteConnection) {
        // A failed `BEGIN IMMEDIATE` starts no transaction.
    }

    async fn store_and_commit(
        mut tx: Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        // In-process: round trips cost nothing worth merging statements for.
        if !Self::store(&mut tx, row).await? {
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
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
