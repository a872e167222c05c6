//! SQLite: the embedded default, for one process.
//!
//! Timestamps are UTC text `YYYY-MM-DD HH:MM:SS.SSS`, the format of SQLite's own date
//! functions. Transactions start with `BEGIN IMMEDIATE`: an execution holds the write lock, and
//! with it its key, from its first statement on; lock waits are bounded by `busy_timeout`.

use std::str::FromStr;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions as _, Executor as _, Pool, QueryBuilder, Row as _, Sqlite, Transaction};

use crate::backend::{Backend, Begun, Failure, KeyLock, NewRow, TxSettings};
use crate::error::StoreError;
use crate::key::KeyRef;
use crate::list::{self, Counts, KeyFilter, Page};
use crate::migrate::LEGACY_SQLX_VERSION;
use crate::migration::Migration;
use crate::operator::{self, Acted, Action, Actor};
use crate::row::{KeyRow, KeyStatus, RawRow, StoredKey, StoredResponse, StoredStatus};
use crate::sealed;

/// The migrations of the key table on SQLite.
static MIGRATIONS: [Migration; 7] = [
    Migration::new(
        1,
        "idempotency_keys",
        include_str!("../migrations/sqlite/0001_idempotency_keys.sql"),
    ),
    Migration::new(
        2,
        "staged mode and the audit trail",
        include_str!("../migrations/sqlite/0002_staged.sql"),
    ),
    Migration::new(
        3,
        "idempotency_outbox",
        include_str!("../migrations/sqlite/0003_outbox.sql"),
    ),
    Migration::new(
        4,
        "idempotency_operations",
        include_str!("../migrations/sqlite/0004_operations.sql"),
    ),
    Migration::new(
        5,
        "idempotency_processing",
        include_str!("../migrations/sqlite/0005_processing.sql"),
    ),
    Migration::new(
        6,
        "the documents of registered operations",
        include_str!("../migrations/sqlite/0006_operation_docs.sql"),
    ),
    Migration::new(
        8,
        "forced operator actions in the audit trail",
        include_str!("../migrations/sqlite/0008_audit_forced.sql"),
    ),
];

mod sql {
    // A timestamp column in milliseconds. idem writes text timestamps; a plain number an
    // operator wrote by hand (stored as text: the column has text affinity) is read as Unix
    // seconds.
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

    /// Every column of a key row, in the order `raw` reads them.
    macro_rules! columns {
        () => {
            concat!(
                "scope, operation, idempotency_key, fingerprint, status, response_status, \
                 response_headers, response_body, ",
                expires_ms!("created_at"),
                ", ",
                expires_ms!("completed_at"),
                ", ",
                expires_ms!("expires_at"),
                ", ",
                expires_ms!("locked_until"),
                ", attempt, recovery_point"
            )
        };
    }

    pub(super) const LOOKUP: &str = concat!(
        "SELECT fingerprint, status, response_status, response_headers, response_body, ",
        expires_ms!("expires_at"),
        " AS expires_at_ms, ",
        expires_ms!("locked_until"),
        " AS locked_until_ms, attempt \
         FROM idempotency_keys WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3"
    );

    /// The completed row, inserted once the handler has run; nothing if the key exists.
    pub(super) const INSERT_COMPLETED: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, response_status, \
         response_headers, response_body, created_at, completed_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, 'completed', ?5, ?6, ?7, \
         strftime('%Y-%m-%d %H:%M:%f', ?8 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?9 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?10 / 1000.0, 'unixepoch')) \
         ON CONFLICT (scope, operation, idempotency_key) DO NOTHING";

    /// The same, overwriting a completed row that had expired when the execution began; a
    /// processing row is never replaced (`KeyStatus::at`: a key that is not final never
    /// expires).
    pub(super) const INSERT_COMPLETED_OR_REPLACE_EXPIRED: &str = concat!(
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
         completed_at = excluded.completed_at, expires_at = excluded.expires_at \
         WHERE idempotency_keys.status = 'completed' AND ",
        expires_ms!("idempotency_keys.expires_at"),
        " <= ?8"
    );

    pub(super) const SAVEPOINT: &str = "SAVEPOINT idem_handler";
    pub(super) const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT idem_handler";

    /// Expired keys only (`KeyStatus::at`): completed rows past `expires_at`, never a
    /// processing row.
    pub(super) const SWEEP: &str = "DELETE FROM idempotency_keys \
         WHERE (scope, operation, idempotency_key) IN (\
         SELECT scope, operation, idempotency_key FROM idempotency_keys \
         WHERE status = 'completed' \
         AND expires_at <= strftime('%Y-%m-%d %H:%M:%f', ?1 / 1000.0, 'unixepoch') LIMIT ?2)";

    /// Keys `SWEEP` deletes at this `before`, in all its batches.
    pub(super) const COUNT_SWEEPABLE: &str = "SELECT count(*) FROM idempotency_keys \
         WHERE status = 'completed' \
         AND expires_at <= strftime('%Y-%m-%d %H:%M:%f', ?1 / 1000.0, 'unixepoch')";

    pub(super) const REGISTER: &str = "INSERT INTO idempotency_operations \
         (operation, scope, ttl_ms, mode, lease_ms, doc, registered_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?7, strftime('%Y-%m-%d %H:%M:%f', ?6 / 1000.0, 'unixepoch')) \
         ON CONFLICT (operation) DO UPDATE SET scope = excluded.scope, \
         ttl_ms = excluded.ttl_ms, mode = excluded.mode, lease_ms = excluded.lease_ms, \
         doc = excluded.doc, registered_at = excluded.registered_at";

    pub(super) const REGISTRATIONS: &str = concat!(
        "SELECT operation, scope, ttl_ms, mode, lease_ms, doc, ",
        expires_ms!("registered_at"),
        " FROM idempotency_operations ORDER BY operation"
    );

    pub(super) const GET: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM idempotency_keys WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3"
    );

    /// Processing and stuck keys are looked for in `idempotency_processing`, which holds
    /// staged mode's processing keys only, instead of among all keys.
    pub(super) const IN_PROCESSING: &str = " AND (scope, operation, idempotency_key) IN \
         (SELECT scope, operation, idempotency_key FROM idempotency_processing)";

    /// The start of a listing; the filters follow as `AND …`.
    pub(super) const LIST: &str = concat!("SELECT ", columns!(), " FROM idempotency_keys WHERE 1");

    /// `expires_at` in milliseconds, as the filters compare it with `now_ms` (the same value
    /// `KeyRow::expires_at_ms` holds, so filters and the status shown agree).
    pub(super) const EXPIRES_MS: &str = expires_ms!("expires_at");
    /// A key row's `expires_at`, in milliseconds.
    pub(super) const EXPIRES_AT_MS: &str = concat!(
        "SELECT ",
        expires_ms!("expires_at"),
        " FROM idempotency_keys WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3"
    );
    /// `locked_until` in milliseconds, likewise.
    pub(super) const LOCKED_MS: &str = expires_ms!("locked_until");

    /// Expiry now, never later than it was.
    pub(super) const EXPIRE: &str = concat!(
        "UPDATE idempotency_keys \
         SET expires_at = strftime('%Y-%m-%d %H:%M:%f', ?4 / 1000.0, 'unixepoch') \
         WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 AND ",
        expires_ms!("expires_at"),
        " > ?4 RETURNING ",
        columns!()
    );

    pub(super) const DELETE: &str = concat!(
        "DELETE FROM idempotency_keys \
         WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 RETURNING ",
        columns!()
    );

    /// Keys per operation and state (`KeyStatus::at`, in SQL: only a completed row expires;
    /// a processing row is stuck once its lease ran out, whatever `expires_at` says), with
    /// the earliest `created_at` of each group (the stuck groups' give the oldest stuck key).
    pub(super) const COUNTS: &str = concat!(
        "SELECT operation, CASE WHEN status = 'completed' AND ",
        expires_ms!("expires_at"),
        " <= ?1 THEN 'expired' WHEN status = 'processing' AND ",
        expires_ms!("locked_until"),
        " <= ?1 THEN 'stuck' ELSE status END AS state, count(*), min(",
        expires_ms!("created_at"),
        ") FROM idempotency_keys GROUP BY 1, 2"
    );

    // Operator actions, each run in the transaction `BEGIN IMMEDIATE` opened to read the
    // row.

    /// The lease run out now, and the running attempt, if any, fenced out.
    pub(super) const RELEASE: &str = concat!(
        "UPDATE idempotency_keys SET attempt = attempt + 1, \
         locked_until = strftime('%Y-%m-%d %H:%M:%f', ?4 / 1000.0, 'unixepoch') \
         WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 RETURNING ",
        columns!()
    );

    /// Completed with the operator's response, the running attempt fenced out, its TTL
    /// counted from now: the operation's registered `ttl_ms`, or for an operation not in
    /// the registry the row's own (`expires_at - created_at`, what its reservation set).
    pub(super) const COMPLETE: &str = concat!(
        "UPDATE idempotency_keys SET status = 'completed', response_status = ?4, \
         response_headers = ?5, response_body = ?6, \
         completed_at = strftime('%Y-%m-%d %H:%M:%f', ?7 / 1000.0, 'unixepoch'), \
         expires_at = strftime('%Y-%m-%d %H:%M:%f', (?7 + COALESCE(\
         (SELECT ttl_ms FROM idempotency_operations WHERE operation = ?2), max(",
        expires_ms!("expires_at"),
        " - ",
        expires_ms!("created_at"),
        ", 0))) / 1000.0, 'unixepoch'), \
         locked_until = NULL, attempt = attempt + 1 \
         WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 RETURNING ",
        columns!()
    );

    pub(super) const DELETE_ONLY: &str = "DELETE FROM idempotency_keys \
         WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3";

    pub(super) const INSERT_AUDIT: &str = "INSERT INTO idempotency_audit \
         (at, operator, scope, operation, idempotency_key, action, reason, before, after, forced) \
         VALUES (strftime('%Y-%m-%d %H:%M:%f', ?1 / 1000.0, 'unixepoch'), \
         ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id";

    /// The start of a reading of the audit trail; the filters follow as `AND …`.
    pub(super) const AUDIT: &str = concat!(
        "SELECT id, ",
        expires_ms!("at"),
        ", operator, scope, operation, idempotency_key, action, reason, before, after, \
         forced FROM idempotency_audit WHERE 1"
    );

    pub(super) const JOURNAL: &str = "SELECT recovery_point, journal, request \
         FROM idempotency_keys WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3";

    /// The pages of the table and its indexes; fails where SQLite lacks `dbstat`.
    pub(super) const TABLE_BYTES: &str = "SELECT sum(pgsize) FROM dbstat WHERE name IN \
         (SELECT name FROM sqlite_master WHERE tbl_name = 'idempotency_keys')";

    // The migration runner.

    pub(super) const HISTORY: &str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
         version     BIGINT PRIMARY KEY, \
         description TEXT   NOT NULL, \
         checksum    BLOB   NOT NULL, \
         applied_at  TEXT   NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')))";
    pub(super) const APPLIED: &str =
        "SELECT version, checksum FROM idem_schema_migrations ORDER BY version";
    pub(super) const APPLIED_ONE: &str =
        "SELECT checksum FROM idem_schema_migrations WHERE version = ?1";
    pub(super) const RECORD: &str = "INSERT INTO idem_schema_migrations \
         (version, description, checksum) VALUES (?1, ?2, ?3)";
    /// Whether idem 0.1's history (sqlx's) is in the database.
    pub(super) const HAS_SQLX_HISTORY: &str = "SELECT EXISTS (SELECT 1 FROM sqlite_master \
         WHERE type = 'table' AND name = '_sqlx_migrations')";
    pub(super) const FORGET_SQLX_VERSION: &str = "DELETE FROM _sqlx_migrations WHERE version = ?1";
}

/// A key row's columns, in the order of `sql::columns!`.
fn raw(row: &SqliteRow) -> Result<RawRow, sqlx::Error> {
    Ok(RawRow {
        scope: row.try_get(0)?,
        operation: row.try_get(1)?,
        key: row.try_get(2)?,
        fingerprint: row.try_get(3)?,
        status: row.try_get(4)?,
        response_status: row.try_get(5)?,
        response_headers: row.try_get(6)?,
        response_body: row.try_get(7)?,
        created_at_ms: row.try_get(8)?,
        completed_at_ms: row.try_get(9)?,
        expires_at_ms: row.try_get(10)?,
        locked_until_ms: row.try_get(11)?,
        attempt: row.try_get(12)?,
        recovery_point: row.try_get(13)?,
    })
}

fn key_row(row: &SqliteRow, now_ms: i64) -> Result<KeyRow, StoreError> {
    raw(row)?.into_row(now_ms)
}

/// `statement` with the key's three parts bound as its first three parameters (scope,
/// operation, key).
fn by_key<'q>(
    statement: &'q str,
    key: KeyRef<'q>,
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    sqlx::query(statement)
        .bind(key.scope)
        .bind(key.operation)
        .bind(key.key)
}

impl Backend for Sqlite {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
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
            .busy_timeout(settings.lock_timeout)
            // idem's statements carry keys, tenants and response bodies: never logged.
            .disable_statement_logging();
        SqlitePoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .test_before_acquire(false)
            .connect_with(options)
            .await
    }

    async fn lookup(
        conn: &mut SqliteConnection,
        key: KeyRef<'_>,
    ) -> Result<Option<StoredKey>, sqlx::Error> {
        let row = by_key(sql::LOOKUP, key).fetch_optional(conn).await?;
        let Some(row) = row else { return Ok(None) };
        let status = StoredStatus::from_column(row.try_get(1)?);
        let response_status: Option<i32> = row.try_get(2)?;
        let response = match response_status {
            Some(code) if status == StoredStatus::Completed => Some(StoredResponse::lenient(
                code,
                row.try_get(3)?,
                row.try_get(4)?,
            )),
            _ => None,
        };
        Ok(Some(StoredKey {
            fingerprint: row.try_get(0)?,
            status,
            response,
            expires_at_ms: row.try_get(5)?,
            locked_until_ms: row.try_get(6)?,
            attempt: row.try_get(7)?,
        }))
    }

    async fn namespace(_conn: &mut SqliteConnection) -> Result<String, sqlx::Error> {
        // One database file, one key table, one write lock: nothing to tell apart.
        Ok(String::new())
    }

    async fn begin<'c>(
        conn: &'c mut SqliteConnection,
        _settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        // The write lock, taken now rather than at the first write: it is the key's lock.
        let mut tx = Transaction::begin(conn, Some("BEGIN IMMEDIATE".into())).await?;
        let Some(lock) = lock else {
            return Ok(Begun::Free(tx));
        };
        // Look again, under the lock: in-process, no round trip.
        let row: Option<i64> = sqlx::query_scalar(sql::EXPIRES_AT_MS)
            .bind(lock.key.scope)
            .bind(lock.key.operation)
            .bind(lock.key.key)
            .fetch_optional(&mut *tx)
            .await?;
        match (row, lock.expired_by_ms) {
            (None, _) => Ok(Begun::Free(tx)),
            (Some(expires), Some(by)) if expires <= by => Ok(Begun::Free(tx)),
            (Some(_), _) => {
                tx.rollback().await?;
                Ok(Begun::Taken)
            }
        }
    }

    fn begin_statement(_settings: &TxSettings) -> String {
        "BEGIN".to_owned()
    }

    async fn abandon_begin(_conn: &mut SqliteConnection) {
        // A failed `BEGIN IMMEDIATE` starts no transaction.
    }

    async fn savepoint(tx: &mut Transaction<'_, Self>) -> Result<(), sqlx::Error> {
        sqlx::query(sql::SAVEPOINT).execute(&mut **tx).await?;
        Ok(())
    }

    async fn rollback_to_savepoint(tx: &mut Transaction<'_, Self>) -> Result<(), sqlx::Error> {
        sqlx::query(sql::ROLLBACK_TO_SAVEPOINT)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn insert_completed(
        tx: &mut Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        let statement = if row.replace_expired {
            sql::INSERT_COMPLETED_OR_REPLACE_EXPIRED
        } else {
            sql::INSERT_COMPLETED
        };
        let done = sqlx::query(statement)
            .bind(row.key.scope)
            .bind(row.key.operation)
            .bind(row.key.key)
            .bind(row.fingerprint)
            .bind(i32::from(row.status))
            .bind(row.headers_json)
            .bind(row.body)
            .bind(row.created_ms)
            .bind(row.completed_ms)
            .bind(row.expires_ms)
            .execute(&mut **tx)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn insert_completed_and_commit(
        mut tx: Transaction<'_, Self>,
        mut row: NewRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        // In-process: round trips cost nothing worth merging statements for.
        row.replace_expired = false; // Documented as ignored: see `insert_completed`.
        if !Self::insert_completed(&mut tx, row).await? {
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::backend::is_connection_error(error) {
            return Failure::Disconnected;
        }
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

    async fn key_lock_taken(
        _conn: &mut SqliteConnection,
        _lock: KeyLock<'_>,
    ) -> Result<bool, sqlx::Error> {
        // The key's lock is the database's write lock: every writer's. Cannot tell.
        Ok(false)
    }
}

impl sealed::Sealed for Sqlite {
    async fn run_migrations(pool: &Pool<Self>) -> Result<(), StoreError> {
        let mut conn = pool.acquire().await?;
        conn.execute(sql::HISTORY).await?;
        let recorded: Vec<(i64, Vec<u8>)> =
            sqlx::query_as(sql::APPLIED).fetch_all(&mut *conn).await?;
        for migration in crate::migrate::pending(&MIGRATIONS, &recorded)? {
            let version = migration.version;
            // The write lock: another process migrating waits here, then finds it done.
            let mut tx =
                Transaction::<Sqlite>::begin(&mut *conn, Some("BEGIN IMMEDIATE".into())).await?;
            let applied: Option<Vec<u8>> = sqlx::query_scalar(sql::APPLIED_ONE)
                .bind(version)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some(checksum) = applied {
                migration.verify(&checksum)?;
                continue;
            }
            tx.execute(migration.sql)
                .await
                .map_err(|e| StoreError::migration_failed(version, e))?;
            if version == 1 {
                forget_sqlx_history(&mut tx)
                    .await
                    .map_err(|e| StoreError::migration_failed(version, e))?;
            }
            sqlx::query(sql::RECORD)
                .bind(version)
                .bind(migration.description)
                .bind(migration.checksum().as_slice())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            tracing::info!(
                version,
                description = migration.description,
                "key table migrated"
            );
        }
        Ok(())
    }

    async fn get(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        now_ms: i64,
    ) -> Result<Option<KeyRow>, StoreError> {
        let row = by_key(sql::GET, key).fetch_optional(pool).await?;
        row.map(|row| key_row(&row, now_ms)).transpose()
    }

    async fn list(pool: &Pool<Self>, filter: &KeyFilter, now_ms: i64) -> Result<Page, StoreError> {
        let limit = filter.effective_limit();
        let mut query = QueryBuilder::<Sqlite>::new(sql::LIST);
        match filter.status {
            None => {}
            Some(KeyStatus::Completed) => {
                query.push(" AND status = 'completed' AND ");
                query.push(sql::EXPIRES_MS).push(" > ").push_bind(now_ms);
            }
            Some(KeyStatus::Expired) => {
                query.push(" AND status = 'completed' AND ");
                query.push(sql::EXPIRES_MS).push(" <= ").push_bind(now_ms);
            }
            Some(KeyStatus::Processing) => {
                query.push(sql::IN_PROCESSING);
                query.push(" AND status = 'processing' AND (locked_until IS NULL OR ");
                query
                    .push(sql::LOCKED_MS)
                    .push(" > ")
                    .push_bind(now_ms)
                    .push(")");
            }
            Some(KeyStatus::Stuck) => {
                query.push(sql::IN_PROCESSING);
                query.push(" AND status = 'processing' AND ");
                query.push(sql::LOCKED_MS).push(" <= ").push_bind(now_ms);
            }
        }
        if let Some(operation) = &filter.operation {
            query
                .push(" AND operation = ")
                .push_bind(operation.as_str());
        }
        if let Some(scope) = &filter.scope {
            query.push(" AND scope = ").push_bind(scope.as_str());
        }
        if let Some(prefix) = &filter.key_prefix {
            // `GLOB`, not `LIKE`: SQLite's `LIKE` ignores ASCII case.
            query
                .push(" AND idempotency_key GLOB ")
                .push_bind(glob_prefix(prefix));
        }
        if let Some(after) = &filter.after {
            let after = after.key();
            query
                .push(" AND (scope, operation, idempotency_key) > (")
                .push_bind(after.scope)
                .push(", ")
                .push_bind(after.operation)
                .push(", ")
                .push_bind(after.key)
                .push(")");
        }
        query
            .push(" ORDER BY scope, operation, idempotency_key LIMIT ")
            .push_bind(i64::from(limit) + 1);
        let rows = query.build().fetch_all(pool).await?;
        let rows = rows.iter().map(raw).collect::<Result<Vec<_>, _>>()?;
        list::page_of(rows, limit, now_ms)
    }

    async fn expire(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        now_ms: i64,
    ) -> Result<Option<(KeyRow, KeyRow)>, StoreError> {
        let mut conn = pool.acquire().await?;
        let mut tx =
            Transaction::<Sqlite>::begin(&mut *conn, Some("BEGIN IMMEDIATE".into())).await?;
        let before = by_key(sql::GET, key).fetch_optional(&mut *tx).await?;
        // No row: dropping `tx` rolls back.
        let Some(before) = before else {
            return Ok(None);
        };
        let before = key_row(&before, now_ms)?;
        let after = by_key(sql::EXPIRE, key)
            .bind(now_ms)
            .fetch_optional(&mut *tx)
            .await?;
        let after = match after {
            Some(after) => key_row(&after, now_ms)?,
            // It had expired already: unchanged.
            None => before.clone(),
        };
        tx.commit().await?;
        Ok(Some((before, after)))
    }

    async fn delete(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        now_ms: i64,
    ) -> Result<Option<KeyRow>, StoreError> {
        let row = by_key(sql::DELETE, key).fetch_optional(pool).await?;
        row.map(|row| key_row(&row, now_ms)).transpose()
    }

    async fn sweep_batch(pool: &Pool<Self>, before_ms: i64, batch: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(sql::SWEEP)
            .bind(before_ms)
            .bind(batch)
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn counts(pool: &Pool<Self>, now_ms: i64) -> Result<Counts, StoreError> {
        let rows: Vec<(String, String, i64, Option<i64>)> = sqlx::query_as(sql::COUNTS)
            .bind(now_ms)
            .fetch_all(pool)
            .await?;
        let mut counts = Counts::default();
        for (operation, status, n, oldest) in rows {
            counts.add(
                operation,
                list::counted_status(&status)?,
                list::count(n),
                oldest,
            );
        }
        counts.table_bytes = match sqlx::query_scalar::<_, Option<i64>>(sql::TABLE_BYTES)
            .fetch_one(pool)
            .await
        {
            Ok(bytes) => bytes.map(list::count),
            // SQLite built without `dbstat`.
            Err(sqlx::Error::Database(e)) if e.message().contains("no such table") => None,
            Err(error) => return Err(error.into()),
        };
        Ok(counts)
    }

    async fn act(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        expected: &KeyRow,
        action: &Action,
        by: &Actor,
        now_ms: i64,
    ) -> Result<Acted, StoreError> {
        let mut conn = pool.acquire().await?;
        act_on(&mut conn, key, expected, action, by, now_ms).await
    }

    crate::operator::operator_reads!();
    crate::operations::operations_sql!();
}

/// The body of `Sealed::act`, on a connection of the pool.
async fn act_on(
    conn: &mut SqliteConnection,
    key: KeyRef<'_>,
    expected: &KeyRow,
    action: &Action,
    by: &Actor,
    now_ms: i64,
) -> Result<Acted, StoreError> {
    // The write lock, from the read on: nothing changes the row between the comparison
    // and the action.
    let mut tx = Transaction::<Sqlite>::begin(conn, Some("BEGIN IMMEDIATE".into())).await?;
    let current = by_key(sql::GET, key).fetch_optional(&mut *tx).await?;
    let current = current.map(|row| key_row(&row, now_ms)).transpose()?;
    // Refused: dropping `tx` rolls back.
    let (before, forced) = operator::check(expected, current, action, by.forced, now_ms)?;
    let after = match action {
        Action::Release => Some(
            by_key(sql::RELEASE, key)
                .bind(now_ms)
                .fetch_one(&mut *tx)
                .await?,
        ),
        Action::Complete(response) | Action::Fail(response) => Some(
            by_key(sql::COMPLETE, key)
                .bind(i32::from(response.status))
                .bind(response.headers_json())
                .bind(response.body.as_ref())
                .bind(now_ms)
                .fetch_one(&mut *tx)
                .await?,
        ),
        Action::Expire => Some(
            by_key(sql::EXPIRE, key)
                .bind(now_ms)
                .fetch_one(&mut *tx)
                .await?,
        ),
        Action::Delete => {
            by_key(sql::DELETE_ONLY, key).execute(&mut *tx).await?;
            None
        }
    };
    let after = after.map(|row| key_row(&row, now_ms)).transpose()?;
    let audit_id: i64 = sqlx::query_scalar(sql::INSERT_AUDIT)
        .bind(now_ms)
        .bind(by.operator.as_str())
        .bind(key.scope)
        .bind(key.operation)
        .bind(key.key)
        .bind(action.name())
        .bind(by.reason.as_deref())
        .bind(operator::row_json(&before))
        .bind(after.as_ref().map(operator::row_json))
        .bind(forced)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Acted {
        before,
        after,
        audit_id,
        forced,
    })
}

/// Deletes idem 0.1's row from sqlx's history, if there is one: the table it recorded is
/// the one migration 1 just adopted.
async fn forget_sqlx_history(tx: &mut Transaction<'_, Sqlite>) -> Result<(), sqlx::Error> {
    let exists: bool = sqlx::query_scalar(sql::HAS_SQLX_HISTORY)
        .fetch_one(&mut **tx)
        .await?;
    if exists {
        let done = sqlx::query(sql::FORGET_SQLX_VERSION)
            .bind(LEGACY_SQLX_VERSION)
            .execute(&mut **tx)
            .await?;
        if done.rows_affected() > 0 {
            tracing::info!(
                version = LEGACY_SQLX_VERSION,
                "removed idem's former migration from _sqlx_migrations"
            );
        }
    }
    Ok(())
}

/// A `GLOB` pattern for keys starting with `prefix`: its wildcards (`*`, `?`, `[`) each in a
/// bracket of their own.
fn glob_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[') {
            pattern.push('[');
            pattern.push(c);
            pattern.push(']');
        } else {
            pattern.push(c);
        }
    }
    pattern.push('*');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_wildcards_literally() {
        assert_eq!(glob_prefix("a*b?c[d]%_"), "a[*]b[?]c[[]d]%_*");
        assert_eq!(glob_prefix(""), "*");
    }
}
