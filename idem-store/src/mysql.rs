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

use crate::backend::{Backend, look_again};
use crate::glue::{Arg, Glue as _, lock_id};
use crate::migration::{Migration, migration};
use crate::protocol::{Begun, Failure, KeyLock, TxSettings};
use crate::sql::{Claim, Sql};

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

/// Every statement MySQL is sent ([`Sql`] says what each does).
const SQL: Sql = Sql {
    lookup: "\
        SELECT fingerprint, status, response_status, response_headers, response_body, \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000), \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', locked_until) DIV 1000), attempt \
        FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    expires_at: "\
        SELECT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000) \
        FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    insert_completed: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        response_status, response_headers, response_body, created_at, completed_at, expires_at) \
        VALUES (?, ?, ?, ?, 'completed', ?, ?, ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND), DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))",
    // The plain insert: `clear_expired` deleted the expired row first.
    insert_completed_or_replace_expired: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        response_status, response_headers, response_body, created_at, completed_at, expires_at) \
        VALUES (?, ?, ?, ?, 'completed', ?, ?, ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND), DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))",
    get: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) \
        DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', completed_at) DIV 1000), \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000), \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', locked_until) DIV 1000), attempt, \
        recovery_point \
        FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    get_for_update: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) \
        DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', completed_at) DIV 1000), \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000), \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', locked_until) DIV 1000), attempt, \
        recovery_point \
        FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ? FOR \
        UPDATE",
    list: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at) \
        DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', completed_at) DIV 1000), \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000), \
        (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', locked_until) DIV 1000), attempt, \
        recovery_point \
        FROM idempotency_keys WHERE 1 = 1",
    list_completed: " \
        AND status = 'completed' AND expires_at > DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND)",
    list_expired: " \
        AND status = 'completed' AND expires_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND)",
    list_processing: " \
        AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM \
        idempotency_processing) AND status = 'processing' AND (locked_until IS NULL OR \
        locked_until > DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))",
    list_stuck: " \
        AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM \
        idempotency_processing) AND status = 'processing' AND locked_until <= \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)",
    expire: "\
        UPDATE idempotency_keys SET expires_at = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND) \
        WHERE scope = ? AND operation = ? AND idempotency_key = ? AND (TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', expires_at) DIV 1000) > ?",
    delete: "\
        DELETE FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    // Single-table `DELETE … LIMIT`: MySQL refuses a subquery on the table it deletes from.
    sweep: "\
        DELETE FROM idempotency_keys WHERE status = 'completed' AND expires_at <= \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) \
        ORDER BY expires_at LIMIT ?",
    count_sweepable: "\
        SELECT count(*) FROM idempotency_keys \
        WHERE status = 'completed' AND expires_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND)",
    counts: "\
        SELECT operation, CASE WHEN status = 'completed' AND expires_at <= DATE_ADD('1970-01-01', \
        INTERVAL ((?) * 1000) MICROSECOND) THEN 'expired' WHEN status = 'processing' AND \
        locked_until <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) THEN 'stuck' \
        ELSE status END AS state, count(*), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        min(created_at)) DIV 1000) \
        FROM idempotency_keys GROUP BY 1, 2",
    release: "\
        UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = DATE_ADD('1970-01-01', \
        INTERVAL ((?) * 1000) MICROSECOND) \
        WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    complete: "\
        UPDATE idempotency_keys SET status = 'completed', response_status = ?, response_headers = \
        ?, response_body = ?, completed_at = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND), expires_at = DATE_ADD('1970-01-01', INTERVAL ((? + COALESCE((SELECT ttl_ms \
        FROM idempotency_operations WHERE operation = ?), GREATEST((TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', expires_at) DIV 1000) - (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        created_at) DIV 1000), 0))) * 1000) MICROSECOND), locked_until = NULL, attempt = attempt \
        + 1 \
        WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    delete_only: "\
        DELETE FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    insert_audit: "\
        INSERT INTO idempotency_audit (at, operator, scope, operation, idempotency_key, action, \
        reason, `before`, `after`, forced) \
        VALUES (DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), ?, ?, ?, ?, ?, ?, ?, \
        ?, ?)",
    audit: "\
        SELECT id, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', at) DIV 1000), operator, scope, \
        operation, idempotency_key, action, reason, `before`, `after`, forced \
        FROM idempotency_audit WHERE 1 = 1",
    journal: "\
        SELECT recovery_point, journal, request \
        FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    register: "\
        INSERT INTO idempotency_operations (operation, scope, ttl_ms, mode, lease_ms, doc, \
        registered_at) \
        VALUES (?, ?, ?, ?, ?, ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)) \
        ON DUPLICATE KEY UPDATE scope = VALUES(scope), ttl_ms = VALUES(ttl_ms), mode = \
        VALUES(mode), lease_ms = VALUES(lease_ms), doc = VALUES(doc), registered_at = \
        VALUES(registered_at)",
    registrations: "\
        SELECT operation, scope, ttl_ms, mode, lease_ms, doc, (TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', registered_at) DIV 1000) \
        FROM idempotency_operations ORDER BY operation",
    reserve: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        request, created_at, expires_at, locked_until, attempt) \
        VALUES (?, ?, ?, ?, 'processing', ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND), DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), 1)",
    // The plain reservation: `reopen_expired` reopened an expired row first, if any.
    reserve_or_replace_expired: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        request, created_at, expires_at, locked_until, attempt) \
        VALUES (?, ?, ?, ?, 'processing', ?, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND), DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), 1)",
    reserve_held: None,
    hold: None,
    let_go: None,
    owner_gone: None,
    clear_expired: Some(
        "\
        DELETE FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ? \
        AND status = 'completed' AND expires_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND)",
    ),
    reopen_expired: Some(
        "\
        UPDATE idempotency_keys SET fingerprint = ?, request = ?, created_at = \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), locked_until = \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), attempt = attempt + 1, journal \
        = NULL, recovery_point = NULL, response_status = NULL, response_headers = NULL, \
        response_body = NULL, completed_at = NULL, status = 'processing', expires_at = \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) \
        WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'completed' AND \
        expires_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)",
    ),
    sweep_locks: Some(
        "\
        DELETE FROM idempotency_locks WHERE taken_at <= DATE_ADD('1970-01-01', INTERVAL ((?) * \
        1000) MICROSECOND) \
        ORDER BY taken_at LIMIT ?",
    ),
    lease_of: "\
        SELECT attempt, journal, request, fingerprint \
        FROM idempotency_keys WHERE scope = ? AND operation = ? AND idempotency_key = ?",
    take_over: "\
        UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = DATE_ADD('1970-01-01', \
        INTERVAL ((?) * 1000) MICROSECOND) \
        WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing' AND \
        attempt = ? AND (locked_until IS NULL OR locked_until <= DATE_ADD('1970-01-01', INTERVAL \
        ((?) * 1000) MICROSECOND))",
    renew: "\
        UPDATE idempotency_keys SET locked_until = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND) \
        WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing' AND \
        attempt = ?",
    step: "\
        UPDATE idempotency_keys SET recovery_point = ?, journal = ?, locked_until = \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) \
        WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing' AND \
        attempt = ?",
    finish: "\
        UPDATE idempotency_keys SET status = 'completed', response_status = ?, response_headers = \
        ?, response_body = ?, completed_at = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND), expires_at = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), \
        locked_until = NULL \
        WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing' AND \
        attempt = ?",
    give_back: "\
        UPDATE idempotency_keys SET locked_until = DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND) \
        WHERE scope = ? AND operation = ? AND idempotency_key = ? AND status = 'processing' AND \
        attempt = ?",
    stuck: "\
        SELECT scope, operation, idempotency_key, attempt \
        FROM idempotency_keys WHERE (scope, operation, idempotency_key) IN (SELECT scope, \
        operation, idempotency_key FROM idempotency_processing WHERE operation = ?) AND status = \
        'processing' AND operation = ? AND locked_until <= DATE_ADD('1970-01-01', INTERVAL ((?) * \
        1000) MICROSECOND) \
        ORDER BY locked_until LIMIT ?",
    enqueue: "\
        INSERT INTO idempotency_outbox (dedup_id, topic, payload, status, attempts, \
        next_attempt_at, created_at) \
        VALUES (?, ?, ?, 'pending', 0, DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND))",
    claim: Claim::Reread {
        pick: "\
            SELECT id FROM idempotency_outbox \
            WHERE status = 'pending' AND next_attempt_at <= DATE_ADD('1970-01-01', INTERVAL ((?) \
            * 1000) MICROSECOND) AND (locked_until IS NULL OR locked_until <= \
            DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)) \
            ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
        lease: "\
            UPDATE idempotency_outbox SET locked_until = DATE_ADD('1970-01-01', INTERVAL ((?) * \
            1000) MICROSECOND) \
            WHERE id IN (",
        read: "\
            SELECT id, dedup_id, topic, payload, status, attempts, (TIMESTAMPDIFF(MICROSECOND, \
            '1970-01-01', next_attempt_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
            locked_until) DIV 1000), last_error, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
            created_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at) DIV \
            1000) \
            FROM idempotency_outbox WHERE id IN (",
    },
    mark_delivered: "\
        UPDATE idempotency_outbox SET status = 'delivered', delivered_at = DATE_ADD('1970-01-01', \
        INTERVAL ((?) * 1000) MICROSECOND), locked_until = NULL \
        WHERE id = ? AND status = 'pending'",
    mark_failed: "\
        UPDATE idempotency_outbox SET attempts = attempts + 1, last_error = ?, status = CASE WHEN \
        ? THEN 'dead' ELSE 'pending' END, next_attempt_at = DATE_ADD('1970-01-01', INTERVAL \
        ((CASE WHEN ? THEN ? ELSE ? END) * 1000) MICROSECOND), locked_until = NULL \
        WHERE id = ? AND status = 'pending'",
    outbox_get: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', next_attempt_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        locked_until) DIV 1000), last_error, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        created_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at) DIV 1000) \
        FROM idempotency_outbox WHERE dedup_id = ?",
    outbox_find: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', next_attempt_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        locked_until) DIV 1000), last_error, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        created_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at) DIV 1000) \
        FROM idempotency_outbox WHERE id = ?",
    outbox_find_for_update: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', next_attempt_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        locked_until) DIV 1000), last_error, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        created_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at) DIV 1000) \
        FROM idempotency_outbox WHERE id = ? FOR UPDATE",
    outbox_list: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', next_attempt_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        locked_until) DIV 1000), last_error, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        created_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at) DIV 1000) \
        FROM idempotency_outbox ORDER BY id LIMIT ?",
    outbox_list_status: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (TIMESTAMPDIFF(MICROSECOND, \
        '1970-01-01', next_attempt_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        locked_until) DIV 1000), last_error, (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', \
        created_at) DIV 1000), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at) DIV 1000) \
        FROM idempotency_outbox WHERE status = ? \
        ORDER BY id LIMIT ?",
    outbox_counts: "\
        SELECT status, count(*), (TIMESTAMPDIFF(MICROSECOND, '1970-01-01', min(created_at)) DIV \
        1000), count(CASE WHEN locked_until > DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) \
        MICROSECOND) THEN 1 END) \
        FROM idempotency_outbox GROUP BY status",
    outbox_retry: "\
        UPDATE idempotency_outbox SET status = 'pending', attempts = ?, next_attempt_at = \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND), locked_until = NULL \
        WHERE id = ?",
    outbox_retryable: "\
        SELECT id FROM idempotency_outbox \
        WHERE id > ? AND (status = 'dead' OR (status = 'pending' AND next_attempt_at > \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) AND (locked_until IS NULL OR \
        locked_until <= DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND)))) \
        ORDER BY id LIMIT ?",
    sweep_delivered: "\
        DELETE FROM idempotency_outbox WHERE status = 'delivered' AND delivered_at <= \
        DATE_ADD('1970-01-01', INTERVAL ((?) * 1000) MICROSECOND) \
        ORDER BY delivered_at LIMIT ?",
    applied_one: "SELECT checksum FROM idem_schema_migrations WHERE version = ?",
    record: "\
        INSERT INTO idem_schema_migrations (version, description, checksum) \
        VALUES (?, ?, ?)",
    forget_sqlx_version: "DELETE FROM _sqlx_migrations WHERE version = ?",
};

/// The server's flavour, asked once per process: how a statement sets its own lock wait.
static MARIADB: OnceLock<bool> = OnceLock::new();

impl Backend for MySql {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
    }
    const SQL: Sql = SQL;
    const POSITIONAL: bool = true;
    const HISTORY: &'static str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
         version     BIGINT        NOT NULL PRIMARY KEY, \
         description TEXT          NOT NULL, \
         checksum    VARBINARY(32) NOT NULL, \
         applied_at  TIMESTAMP(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE = InnoDB";
    const HAS_SQLX_HISTORY: &'static str = "SELECT EXISTS (SELECT 1 FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations') = 1";
    const RETURNING: bool = false;
    const LAST_INSERT_ID: &'static str = "SELECT CAST(LAST_INSERT_ID() AS SIGNED)";

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

    async fn namespace(conn: &mut MySqlConnection) -> Result<String, sqlx::Error> {
        let row = Self::fetch_optional(conn, "SELECT DATABASE()", &[]).await?;
        Ok(row
            .map(|row| Self::opt_text(&row, 0))
            .transpose()?
            .flatten()
            .unwrap_or_default())
    }

    async fn begin<'c>(
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
        let upsert = "INTO idempotency_locks (lock_id, taken_at) VALUES (?, UTC_TIMESTAMP(3)) \
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

    fn begin_statement(_settings: &TxSettings) -> String {
        // Lock waits are bounded by the server's `innodb_lock_wait_timeout`: a session
        // setting would outlive idem's transaction on the application's connection.
        "BEGIN".to_owned()
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::protocol::is_connection_error(error) {
            return Failure::Disconnected;
        }
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
    async fn key_lock_taken(
        conn: &mut MySqlConnection,
        lock: KeyLock<'_>,
    ) -> Result<bool, sqlx::Error> {
        let sql = "SELECT lock_id FROM idempotency_locks WHERE lock_id = ? FOR UPDATE NOWAIT";
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
