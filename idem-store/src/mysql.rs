//! MySQL 8 and MariaDB 10.6 or later (InnoDB): the store for several application instances
//! sharing one MySQL database. What differs from the other stores, its key's lock (a row of
//! `idempotency_locks`) included, is told in [MySQL and MariaDB](crate#mysql-and-mariadb).

use std::str::FromStr;
use std::sync::OnceLock;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlDatabaseError};
use sqlx::{ConnectOptions as _, MySql, Transaction};

use crate::backend::{Backend, Dialect, look_again};
use crate::glue::{Arg, Glue as _, lock_id};
use crate::migration::{Migration, migration};
use crate::protocol::{Begun, Failure, KeyLock, TxSettings};
use crate::sql::{
    Claim, InboxSql, KeySql, MigrationSql, OperatorSql, OutboxSql, Sql, StagedSql, ToolSql,
};

/// The migrations of the key table on MySQL ([migrations](crate#migrations)).
static MIGRATIONS: [Migration; 6] = [
    migration!(1, "mysql/0001_idempotency_keys.sql",
        "idempotency_keys, the audit trail, the outbox and the operation registry",
        present: "SELECT count(k.request) + count(l.taken_at) + count(p.scope) + count(a.forced) \
                  + count(o.delivered_at) + count(r.doc) FROM idempotency_keys k, \
                  idempotency_locks l, idempotency_processing p, idempotency_audit a, \
                  idempotency_outbox o, idempotency_operations r WHERE 1 = 0 \
                  HAVING (SELECT count(*) FROM information_schema.triggers \
                  WHERE event_object_schema = DATABASE() \
                  AND event_object_table = 'idempotency_keys') >= 3")
    // idem 0.1.0's text, whose update trigger was one compound statement.
    .formerly(&["e060dc77f569aa39e6ea0209bdd1d2d6b41265c2557ac579b61fa14a26d6ecb8"]),
    migration!(2, "mysql/0002_reservation.sql", "staged attempts fenced on their reservation",
        present: "SELECT count(reservation) FROM idempotency_keys WHERE 1 = 0"),
    migration!(3, "mysql/0003_inbox.sql", "the inbox of events not applied",
        present: "SELECT count(first_seen_at) FROM idempotency_inbox WHERE 1 = 0"),
    migration!(4, "mysql/0004_field_digests.sql", "the digests of a key's request fields",
        present: "SELECT count(field_digests) FROM idempotency_keys WHERE 1 = 0"),
    migration!(5, "mysql/0005_sealed_fingerprints.sql", "room for a sealed fingerprint",
        present: "SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE() \
                  AND table_name = 'idempotency_keys' AND column_name = 'fingerprint' \
                  AND character_maximum_length >= 255"),
    migration!(6, "mysql/0006_inbox_unparseable.sql", "unparseable events in the inbox",
        present: "SELECT 1 FROM information_schema.check_constraints \
                  WHERE constraint_schema = DATABASE() \
                  AND constraint_name = 'idempotency_inbox_status' \
                  AND check_clause LIKE '%unparseable%'"),
];

/// Every statement MySQL is sent ([`Sql`] says what each does).
const SQL: Sql = Sql {
    keys: KeySql {
        lookup: include_str!("../sql/mysql/lookup.sql"),
        expires_at: include_str!("../sql/mysql/expires_at.sql"),
        insert_completed: include_str!("../sql/mysql/insert_completed.sql"),
        insert_completed_or_replace_expired: include_str!(
            "../sql/mysql/insert_completed_or_replace_expired.sql"
        ),
        field_digests: include_str!("../sql/mysql/field_digests.sql"),
        begin_write: None,
        namespace: Some(include_str!("../sql/mysql/namespace.sql")),
        session_id: None,
        last_insert_id: Some(include_str!("../sql/mysql/last_insert_id.sql")),
        key_lock_taken: Some(include_str!("../sql/mysql/key_lock_taken.sql")),
    },
    tools: ToolSql {
        get: include_str!("../sql/mysql/get.sql"),
        get_for_update: include_str!("../sql/mysql/get_for_update.sql"),
        list: include_str!("../sql/mysql/list.sql"),
        list_completed: include_str!("../sql/mysql/list_completed.sql"),
        list_expired: include_str!("../sql/mysql/list_expired.sql"),
        list_processing: include_str!("../sql/mysql/list_processing.sql"),
        list_stuck: include_str!("../sql/mysql/list_stuck.sql"),
        expire: include_str!("../sql/mysql/expire.sql"),
        delete: include_str!("../sql/mysql/delete.sql"),
        // Single-table `DELETE … LIMIT`: MySQL refuses a subquery on the table it deletes from.
        sweep: include_str!("../sql/mysql/sweep.sql"),
        count_sweepable: include_str!("../sql/mysql/count_sweepable.sql"),
        counts: include_str!("../sql/mysql/counts.sql"),
        table_bytes: include_str!("../sql/mysql/table_bytes.sql"),
        register: include_str!("../sql/mysql/register.sql"),
        registrations: include_str!("../sql/mysql/registrations.sql"),
    },
    operator: OperatorSql {
        release: include_str!("../sql/mysql/release.sql"),
        complete: include_str!("../sql/mysql/complete.sql"),
        delete_only: include_str!("../sql/mysql/delete_only.sql"),
        insert_audit: include_str!("../sql/mysql/insert_audit.sql"),
        audit: include_str!("../sql/mysql/audit.sql"),
        journal: include_str!("../sql/mysql/journal.sql"),
        begin_batch: Some(include_str!("../sql/mysql/begin_batch.sql")),
        reseal_first: include_str!("../sql/mysql/reseal_first.sql"),
        reseal_next: include_str!("../sql/mysql/reseal_next.sql"),
        reseal: include_str!("../sql/mysql/reseal.sql"),
    },
    staged: StagedSql {
        reserve: include_str!("../sql/mysql/reserve.sql"),
        reserve_or_replace_expired: include_str!("../sql/mysql/reserve_or_replace_expired.sql"),
        reserve_held: None,
        hold: None,
        let_go: None,
        owner_gone: None,
        clear_expired: Some(include_str!("../sql/mysql/clear_expired.sql")),
        reopen_expired: Some(include_str!("../sql/mysql/reopen_expired.sql")),
        sweep_locks: Some(include_str!("../sql/mysql/sweep_locks.sql")),
        lease_of: include_str!("../sql/mysql/lease_of.sql"),
        take_over: include_str!("../sql/mysql/take_over.sql"),
        renew: include_str!("../sql/mysql/renew.sql"),
        step: include_str!("../sql/mysql/step.sql"),
        finish: include_str!("../sql/mysql/finish.sql"),
        give_back: include_str!("../sql/mysql/give_back.sql"),
        stuck: include_str!("../sql/mysql/stuck.sql"),
    },
    outbox: OutboxSql {
        enqueue: include_str!("../sql/mysql/enqueue.sql"),
        claim: Claim::Reread {
            pick: include_str!("../sql/mysql/claim_pick.sql"),
            lease: include_str!("../sql/mysql/claim_lease.sql"),
            read: include_str!("../sql/mysql/claim_read.sql"),
        },
        mark_delivered: include_str!("../sql/mysql/mark_delivered.sql"),
        mark_failed: include_str!("../sql/mysql/mark_failed.sql"),
        outbox_get: include_str!("../sql/mysql/outbox_get.sql"),
        outbox_find: include_str!("../sql/mysql/outbox_find.sql"),
        outbox_find_for_update: include_str!("../sql/mysql/outbox_find_for_update.sql"),
        outbox_list: include_str!("../sql/mysql/outbox_list.sql"),
        outbox_list_status: include_str!("../sql/mysql/outbox_list_status.sql"),
        outbox_counts: include_str!("../sql/mysql/outbox_counts.sql"),
        outbox_retry: include_str!("../sql/mysql/outbox_retry.sql"),
        outbox_retryable: include_str!("../sql/mysql/outbox_retryable.sql"),
        sweep_delivered: include_str!("../sql/mysql/sweep_delivered.sql"),
        outbox_reseal_batch: include_str!("../sql/mysql/outbox_reseal_batch.sql"),
        outbox_reseal: include_str!("../sql/mysql/outbox_reseal.sql"),
    },
    inbox: InboxSql {
        inbox_note: include_str!("../sql/mysql/inbox_note.sql"),
        inbox_first_seen: include_str!("../sql/mysql/inbox_first_seen.sql"),
        inbox_remove: include_str!("../sql/mysql/inbox_remove.sql"),
        inbox_list: include_str!("../sql/mysql/inbox_list.sql"),
        inbox_list_status: include_str!("../sql/mysql/inbox_list_status.sql"),
        inbox_get: include_str!("../sql/mysql/inbox_get.sql"),
        inbox_reseal_batch: include_str!("../sql/mysql/inbox_reseal_batch.sql"),
        inbox_reseal: include_str!("../sql/mysql/inbox_reseal.sql"),
    },
    migrations: MigrationSql {
        applied_one: include_str!("../sql/mysql/applied_one.sql"),
        record: include_str!("../sql/mysql/record.sql"),
        forget_sqlx_version: include_str!("../sql/mysql/forget_sqlx_version.sql"),
        history: include_str!("../sql/mysql/history.sql"),
        has_sqlx_history: include_str!("../sql/mysql/has_sqlx_history.sql"),
        begin_migration: None,
        // A year: migrations may wait for another instance's run.
        lock_migrations: Some(include_str!("../sql/mysql/lock_migrations.sql")),
        unlock_migrations: Some(include_str!("../sql/mysql/unlock_migrations.sql")),
    },
};

/// The server's flavour, asked once per process: how a statement sets its own lock wait.
static MARIADB: OnceLock<bool> = OnceLock::new();

impl Backend for MySql {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
    }
    const SQL: Sql = SQL;
    const DIALECT: Dialect = Dialect {
        positional: true,
        lock_first: true,
        lock_first_miss: 4,
        returning: false,
    };
    // `begin`'s look again answers `Begun::Taken`: a key found taken costs the lock's three
    // round trips, the `ROLLBACK`, then the lookup.

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

    async fn key_lock_taken(
        conn: &mut MySqlConnection,
        lock: KeyLock<'_>,
    ) -> Result<bool, sqlx::Error> {
        // `NOWAIT` fails while another transaction holds (or inserts) the row; holds none after.
        let sql = SQL.keys.key_lock_taken.unwrap_or_default();
        let id = [Arg::Int(lock_id(lock.namespace, lock.key))];
        match Self::fetch_optional(conn, sql, &id).await {
            Ok(_) => Ok(false),
            // MariaDB answers a lock it may not wait for with 1205, MySQL with 3572.
            Err(error) if matches!(number(&error), Some(1205 | 3572)) => Ok(true),
            Err(error) => Err(error),
        }
    }
}

/// The server's error number, for an error of the server's.
fn number(error: &sqlx::Error) -> Option<u16> {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}
