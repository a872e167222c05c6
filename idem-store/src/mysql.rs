//! MySQL 8 and MariaDB 10.6 or later (InnoDB): the store for several application instances
//! sharing one MySQL database.
//!
//! Times are `DATETIME(3)` in UTC, converted to and from milliseconds since the Unix epoch
//! by arithmetic from `1970-01-01`: no session's `time_zone` applies.
//! MySQL has neither `RETURNING` nor `ON CONFLICT`: the generic code reads a written row
//! again in its transaction, takes a duplicate key's error for "exists already", and deletes
//! (or reopens) an expired row before inserting the new one.
//!
//! **The key's lock.** MySQL has no transaction-scoped advisory lock (`GET_LOCK` belongs to
//! the session and outlives a rollback). An execution takes its key's lock by upserting the
//! key's row in `idempotency_locks` (an id derived from the database and the key, as on
//! PostgreSQL) in its own transaction, `READ COMMITTED`: InnoDB holds the row lock until the
//! transaction commits or rolls back, on every path, a dropped connection included (the
//! server rolls its transaction back). A duplicate's upsert waits for it, at most
//! `innodb_lock_wait_timeout`, which idem sets for that one statement only (MariaDB's
//! `SET STATEMENT … FOR`, MySQL's `SET_VAR` hint), in whole seconds; it then looks at the key
//! again (committed meanwhile: [`Begun::Taken`]). Waits that end in a deadlock count as
//! lock waits that ran out. The sweeper deletes lock rows no execution took since its cutoff.

use std::str::FromStr;
use std::sync::OnceLock;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlDatabaseError};
use sqlx::{ConnectOptions as _, MySql, Transaction};

use crate::dialect::{Arg, Dialect, Glue as _, lock_id, look_again, render_all};
use crate::migration::{Migration, migration};
use crate::protocol::{Begun, Failure, KeyLock, TxSettings};
use crate::sql::{CLEAR_EXPIRED, REOPEN_EXPIRED, Sql, insert_completed, reserve};

/// The migrations of the key table on MySQL: the tables as migrations 1 to 8 left them on
/// the other databases, in one. Its `present` query fails (an unknown column or table) or
/// finds no row until it is applied.
static MIGRATIONS: [Migration; 1] = [migration!(
    1,
    "mysql/0001_idempotency_keys.sql",
    "idempotency_keys, the audit trail, the outbox and the operation registry",
    present: "SELECT count(k.request) + count(l.taken_at) + count(p.scope) + count(a.forced) \
              + count(o.delivered_at) + count(r.doc) FROM idempotency_keys k, \
              idempotency_locks l, idempotency_processing p, idempotency_audit a, \
              idempotency_outbox o, idempotency_operations r WHERE 1 = 0 \
              HAVING (SELECT count(*) FROM information_schema.triggers \
              WHERE event_object_schema = DATABASE() \
              AND event_object_table = 'idempotency_keys') >= 3"
)
// idem 0.1.0's text, whose update trigger was one compound statement.
.formerly(&["e060dc77f569aa39e6ea0209bdd1d2d6b41265c2557ac579b61fa14a26d6ecb8"])];

/// The statements MySQL says its own way.
const TEMPLATES: Sql<&str> = Sql {
    insert_completed: insert_completed!(),
    insert_completed_or_replace_expired: insert_completed!(),
    clear_expired: Some(CLEAR_EXPIRED),
    reserve: reserve!(),
    reserve_or_replace_expired: reserve!(),
    reopen_expired: Some(REOPEN_EXPIRED),
    // Single-table `DELETE … LIMIT`: MySQL refuses a subquery on the table it deletes from.
    sweep: "DELETE FROM idempotency_keys WHERE status = 'completed' \
            AND expires_at <= {ts $1} ORDER BY expires_at LIMIT $2",
    // Lock rows no execution took since the sweep's cutoff, in the sweep's batches.
    sweep_locks: Some(
        "DELETE FROM idempotency_locks WHERE taken_at <= {ts $1} ORDER BY taken_at LIMIT $2",
    ),
    sweep_delivered: "DELETE FROM idempotency_outbox WHERE status = 'delivered' \
                      AND delivered_at <= {ts $1} ORDER BY delivered_at LIMIT $2",
    register: "INSERT INTO idempotency_operations \
               (operation, scope, ttl_ms, mode, lease_ms, doc, registered_at) \
               VALUES ($1, $2, $3, $4, $5, $7, {ts $6}) \
               ON DUPLICATE KEY UPDATE scope = VALUES(scope), ttl_ms = VALUES(ttl_ms), \
               mode = VALUES(mode), lease_ms = VALUES(lease_ms), doc = VALUES(doc), \
               registered_at = VALUES(registered_at)",
    enqueue: "INSERT INTO idempotency_outbox \
              (dedup_id, topic, payload, status, attempts, next_attempt_at, created_at) \
              VALUES ($1, $2, $3, 'pending', 0, {ts $4}, {ts $4})",
    ..Sql::STANDARD
};

/// The server's flavour, asked once per process: how a statement sets its own lock wait.
static MARIADB: OnceLock<bool> = OnceLock::new();

impl Dialect for MySql {
    const MIGRATIONS: &'static [Migration] = &MIGRATIONS;
    const TEMPLATES: Sql<&'static str> = TEMPLATES;
    const HISTORY: &'static str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
         version     BIGINT        NOT NULL PRIMARY KEY, \
         description TEXT          NOT NULL, \
         checksum    VARBINARY(32) NOT NULL, \
         applied_at  TIMESTAMP(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE = InnoDB";
    const HAS_SQLX_HISTORY: &'static str = "SELECT EXISTS (SELECT 1 FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations') = 1";
    const RETURNING: bool = false;
    const LAST_INSERT_ID: &'static str = "SELECT CAST(LAST_INSERT_ID() AS SIGNED)";

    fn sql() -> &'static Sql<String> {
        static SQL: OnceLock<Sql<String>> = OnceLock::new();
        SQL.get_or_init(render_all::<Self>)
    }

    fn ms(column: &str) -> String {
        format!("(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {column}) DIV 1000)")
    }

    fn ts(ms: &str) -> String {
        format!("DATE_ADD('1970-01-01', INTERVAL (({ms}) * 1000) MICROSECOND)")
    }

    fn quote(name: &str) -> String {
        format!("`{name}`")
    }

    fn is_duplicate(error: &sqlx::Error) -> bool {
        number(error) == Some(1062)
    }

    fn connect_options(
        url: &str,
        _settings: &TxSettings,
    ) -> Result<MySqlConnectOptions, sqlx::Error> {
        Ok(MySqlConnectOptions::from_str(url)?
            .charset("utf8mb4")
            // idem's statements carry keys, tenants and response bodies: never logged.
            .disable_statement_logging())
    }

    async fn lock_namespace(conn: &mut MySqlConnection) -> Result<String, sqlx::Error> {
        let row = Self::fetch_optional(conn, "SELECT DATABASE()", &[]).await?;
        Ok(row
            .map(|row| Self::opt_text(&row, 0))
            .transpose()?
            .flatten()
            .unwrap_or_default())
    }

    async fn begin_locked<'c>(
        conn: &'c mut MySqlConnection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        let Some(lock) = lock else {
            return Transaction::begin(conn, None).await.map(Begun::Free);
        };
        let mariadb = match MARIADB.get() {
            Some(mariadb) => *mariadb,
            None => {
                let row = Self::fetch_optional(conn, "SELECT VERSION()", &[]).await?;
                let version = row.map(|row| Self::text(&row, 0)).transpose()?;
                *MARIADB.get_or_init(|| version.is_some_and(|v| v.contains("MariaDB")))
            }
        };
        // READ COMMITTED for this transaction only, so that its look again sees what
        // committed while it waited; with `BEGIN`, one round trip.
        let begin = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; BEGIN";
        let mut tx = Transaction::begin(conn, Some(begin.into())).await?;
        // Whole seconds, rounded up: a duplicate waits at least as long as configured.
        let seconds = settings.lock_timeout.as_millis().div_ceil(1000).max(1);
        let upsert = "INTO idempotency_locks (lock_id, taken_at) VALUES ($1, UTC_TIMESTAMP(3)) \
                      ON DUPLICATE KEY UPDATE taken_at = UTC_TIMESTAMP(3)";
        let statement = if mariadb {
            format!("SET STATEMENT innodb_lock_wait_timeout = {seconds} FOR INSERT {upsert}")
        } else {
            format!("INSERT /*+ SET_VAR(innodb_lock_wait_timeout = {seconds}) */ {upsert}")
        };
        let id = [Arg::Int(lock_id(lock.namespace, lock.key))];
        Self::execute(&mut tx, &statement, &id).await?;
        look_again(tx, lock).await
    }

    fn begin_sql(_settings: &TxSettings) -> String {
        // Lock waits are bounded by the server's `innodb_lock_wait_timeout`: a session
        // setting would outlive idem's transaction on the application's connection.
        "BEGIN".to_owned()
    }

    fn failure_of(error: &sqlx::Error) -> Failure {
        match number(error) {
            // Lock wait timeout, deadlock (a duplicate's wait that InnoDB broke), and a
            // statement cut by `max_statement_time` (MariaDB) or `max_execution_time`.
            Some(1205 | 1213 | 1969 | 3024) => Failure::LockTimeout,
            // Server shutdown, connection killed, lost.
            Some(1053 | 1927 | 2006 | 2013) => Failure::Disconnected,
            _ => Failure::Other,
        }
    }

    /// Whether another transaction holds the key's lock row (or is inserting it): a read of
    /// it that may not wait (`NOWAIT`) fails. Outside a transaction it holds nothing after.
    async fn probe_key_lock(
        conn: &mut MySqlConnection,
        lock: KeyLock<'_>,
    ) -> Result<bool, sqlx::Error> {
        let sql = "SELECT lock_id FROM idempotency_locks WHERE lock_id = $1 FOR UPDATE NOWAIT";
        let id = [Arg::Int(lock_id(lock.namespace, lock.key))];
        match Self::fetch_optional(conn, sql, &id).await {
            Ok(_) => Ok(false),
            // MariaDB answers a lock it may not wait for with 1205, MySQL with 3572.
            Err(error) if matches!(number(&error), Some(1205 | 3572)) => Ok(true),
            Err(error) => Err(error),
        }
    }

    async fn lock_migrations(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        // A session lock on the database's name: one process at a time migrates it. A year:
        // migrations may wait for another instance's run.
        let sql = "SELECT GET_LOCK(CONCAT('idem-migrations:', DATABASE()), 31536000)";
        Self::execute(conn, sql, &[]).await.map(drop)
    }

    async fn unlock_migrations(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        let sql = "SELECT RELEASE_LOCK(CONCAT('idem-migrations:', DATABASE()))";
        Self::execute(conn, sql, &[]).await.map(drop)
    }

    async fn table_bytes(conn: &mut MySqlConnection) -> Result<Option<i64>, sqlx::Error> {
        let sql = "SELECT CAST(data_length + index_length AS SIGNED) \
                   FROM information_schema.tables \
                   WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys'";
        let row = Self::fetch_optional(conn, sql, &[]).await?;
        Ok(row.map(|row| Self::opt_int(&row, 0)).transpose()?.flatten())
    }
}

/// The server's error number, for an error of the server's.
fn number(error: &sqlx::Error) -> Option<u16> {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}
