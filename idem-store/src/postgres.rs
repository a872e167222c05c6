//! PostgreSQL: the store for several application instances sharing one database. Its key's
//! lock is told in [the key's lock](crate#the-keys-lock), its commit in
//! [one round trip](crate#postgresql-the-record-and-its-commit-in-one-round-trip).

use std::fmt::Write as _;
use std::str::FromStr;

use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions as _, Connection as _, Postgres, Transaction};

use crate::backend::{Backend, Dialect};
use crate::glue::{Arg, Glue as _, advisory_id, lock_id};
use crate::hosts::HostList;
use crate::key::KeyRef;
use crate::migration::{Migration, migration};
use crate::pooler::{push_bytes, push_text};
use crate::protocol::{Begun, Failure, IDLE_PING_AFTER, KeyLock, NewRow, TxSettings};
use crate::sql::{
    Claim, InboxSql, KeySql, MigrationSql, OperatorSql, OutboxSql, Sql, StagedSql, ToolSql,
};
use crate::staged::Fence;

/// The migrations of the key table on PostgreSQL ([migrations](crate#migrations)).
static MIGRATIONS: [Migration; 12] = [
    migration!(1, "postgres/0001_idempotency_keys.sql", "idempotency_keys",
        present: "SELECT count(expires_at) FROM idempotency_keys WHERE 1 = 0"),
    migration!(2, "postgres/0002_staged.sql", "staged mode and the audit trail",
        present: "SELECT count(k.request) + count(a.reason) FROM idempotency_keys k, \
                  idempotency_audit a WHERE 1 = 0 HAVING to_regproc('idem_lock_key') IS NOT NULL"),
    migration!(3, "postgres/0003_outbox.sql", "idempotency_outbox",
        present: "SELECT count(delivered_at) FROM idempotency_outbox WHERE 1 = 0"),
    migration!(4, "postgres/0004_operations.sql", "idempotency_operations",
        present: "SELECT count(lease_ms) FROM idempotency_operations WHERE 1 = 0"),
    migration!(5, "postgres/0005_processing.sql", "idempotency_processing",
        present: "SELECT 1 FROM pg_trigger WHERE tgrelid = 'idempotency_keys'::regclass \
                  AND tgname = 'idempotency_processing_deleted' \
                  AND EXISTS (SELECT count(*) FROM idempotency_processing WHERE 1 = 0)"),
    migration!(6, "postgres/0006_operation_docs.sql", "the documents of registered operations",
        present: "SELECT count(doc) FROM idempotency_operations WHERE 1 = 0"),
    migration!(7, "postgres/0007_lock_key_fast_path.sql",
        "the key's lock without a second query when it is free",
        present: "SELECT 1 FROM pg_proc WHERE oid = to_regproc('idem_lock_key') \
                  AND prosrc LIKE '%pg_try_advisory_xact_lock%'"),
    migration!(8, "postgres/0008_audit_forced.sql", "forced operator actions in the audit trail",
        present: "SELECT count(forced) FROM idempotency_audit WHERE 1 = 0"),
    migration!(9, "postgres/0009_reservation.sql", "staged attempts fenced on their reservation",
        present: "SELECT count(reservation) FROM idempotency_keys WHERE 1 = 0"),
    migration!(10, "postgres/0010_inbox.sql", "the inbox of events not applied",
        present: "SELECT count(first_seen_at) FROM idempotency_inbox WHERE 1 = 0"),
    migration!(11, "postgres/0011_field_digests.sql", "the digests of a key's request fields",
        present: "SELECT count(field_digests) FROM idempotency_keys WHERE 1 = 0"),
    migration!(12, "postgres/0012_inbox_unparseable.sql", "unparseable events in the inbox",
        present: "SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('idempotency_inbox') \
                  AND conname = 'idempotency_inbox_status_check' \
                  AND pg_get_constraintdef(oid) LIKE '%unparseable%'"),
];

/// Every statement PostgreSQL is sent ([`Sql`] says what each does).
const SQL: Sql = Sql {
    keys: KeySql {
        lookup: include_str!("../sql/postgres/lookup.sql"),
        expires_at: include_str!("../sql/postgres/expires_at.sql"),
        insert_completed: include_str!("../sql/postgres/insert_completed.sql"),
        insert_completed_or_replace_expired: include_str!(
            "../sql/postgres/insert_completed_or_replace_expired.sql"
        ),
        field_digests: include_str!("../sql/postgres/field_digests.sql"),
        begin_write: None,
        namespace: Some(include_str!("../sql/postgres/namespace.sql")),
        session_id: Some(include_str!("../sql/postgres/session_id.sql")),
        last_insert_id: None,
        key_lock_taken: Some(include_str!("../sql/postgres/key_lock_taken.sql")),
    },
    tools: ToolSql {
        get: include_str!("../sql/postgres/get.sql"),
        get_for_update: include_str!("../sql/postgres/get_for_update.sql"),
        list: include_str!("../sql/postgres/list.sql"),
        list_completed: include_str!("../sql/postgres/list_completed.sql"),
        list_expired: include_str!("../sql/postgres/list_expired.sql"),
        list_processing: include_str!("../sql/postgres/list_processing.sql"),
        list_stuck: include_str!("../sql/postgres/list_stuck.sql"),
        expire: include_str!("../sql/postgres/expire.sql"),
        delete: include_str!("../sql/postgres/delete.sql"),
        // Small batches, skipping rows a running request holds (`SKIP LOCKED`): no long locks.
        sweep: include_str!("../sql/postgres/sweep.sql"),
        count_sweepable: include_str!("../sql/postgres/count_sweepable.sql"),
        counts: include_str!("../sql/postgres/counts.sql"),
        table_bytes: include_str!("../sql/postgres/table_bytes.sql"),
        register: include_str!("../sql/postgres/register.sql"),
        registrations: include_str!("../sql/postgres/registrations.sql"),
    },
    operator: OperatorSql {
        release: include_str!("../sql/postgres/release.sql"),
        complete: include_str!("../sql/postgres/complete.sql"),
        delete_only: include_str!("../sql/postgres/delete_only.sql"),
        insert_audit: include_str!("../sql/postgres/insert_audit.sql"),
        audit: include_str!("../sql/postgres/audit.sql"),
        journal: include_str!("../sql/postgres/journal.sql"),
        begin_batch: None,
        reseal_first: include_str!("../sql/postgres/reseal_first.sql"),
        reseal_next: include_str!("../sql/postgres/reseal_next.sql"),
        reseal: include_str!("../sql/postgres/reseal.sql"),
    },
    staged: StagedSql {
        // With its row in `idempotency_processing` (migration 5). One row affected: reserved.
        reserve: include_str!("../sql/postgres/reserve.sql"),
        reserve_or_replace_expired: include_str!("../sql/postgres/reserve_or_replace_expired.sql"),
        // `$10`: attempt 1's hold. Like `hold` and `owner_gone`, it lets go of every hold the
        // session had first: the `FROM` subquery runs before the statement's own calls (its
        // volatile call keeps it from being pulled up).
        reserve_held: Some(include_str!("../sql/postgres/reserve_held.sql")),
        hold: Some(include_str!("../sql/postgres/hold.sql")),
        let_go: Some(include_str!("../sql/postgres/let_go.sql")),
        // `CASE` fixes the order of the two calls.
        owner_gone: Some(include_str!("../sql/postgres/owner_gone.sql")),
        clear_expired: None,
        reopen_expired: None,
        sweep_locks: None,
        lease_of: include_str!("../sql/postgres/lease_of.sql"),
        take_over: include_str!("../sql/postgres/take_over.sql"),
        renew: include_str!("../sql/postgres/renew.sql"),
        step: include_str!("../sql/postgres/step.sql"),
        finish: include_str!("../sql/postgres/finish.sql"),
        give_back: include_str!("../sql/postgres/give_back.sql"),
        stuck: include_str!("../sql/postgres/stuck.sql"),
    },
    outbox: OutboxSql {
        enqueue: include_str!("../sql/postgres/enqueue.sql"),
        claim: Claim::Returning(include_str!("../sql/postgres/claim.sql")),
        mark_delivered: include_str!("../sql/postgres/mark_delivered.sql"),
        mark_failed: include_str!("../sql/postgres/mark_failed.sql"),
        outbox_get: include_str!("../sql/postgres/outbox_get.sql"),
        outbox_find: include_str!("../sql/postgres/outbox_find.sql"),
        outbox_find_for_update: include_str!("../sql/postgres/outbox_find_for_update.sql"),
        outbox_list: include_str!("../sql/postgres/outbox_list.sql"),
        outbox_list_status: include_str!("../sql/postgres/outbox_list_status.sql"),
        outbox_counts: include_str!("../sql/postgres/outbox_counts.sql"),
        outbox_retry: include_str!("../sql/postgres/outbox_retry.sql"),
        outbox_retryable: include_str!("../sql/postgres/outbox_retryable.sql"),
        sweep_delivered: include_str!("../sql/postgres/sweep_delivered.sql"),
        outbox_reseal_batch: include_str!("../sql/postgres/outbox_reseal_batch.sql"),
        outbox_reseal: include_str!("../sql/postgres/outbox_reseal.sql"),
    },
    inbox: InboxSql {
        inbox_note: include_str!("../sql/postgres/inbox_note.sql"),
        inbox_first_seen: include_str!("../sql/postgres/inbox_first_seen.sql"),
        inbox_remove: include_str!("../sql/postgres/inbox_remove.sql"),
        inbox_list: include_str!("../sql/postgres/inbox_list.sql"),
        inbox_list_status: include_str!("../sql/postgres/inbox_list_status.sql"),
        inbox_get: include_str!("../sql/postgres/inbox_get.sql"),
        inbox_reseal_batch: include_str!("../sql/postgres/inbox_reseal_batch.sql"),
        inbox_reseal: include_str!("../sql/postgres/inbox_reseal.sql"),
    },
    migrations: MigrationSql {
        applied_one: include_str!("../sql/postgres/applied_one.sql"),
        record: include_str!("../sql/postgres/record.sql"),
        forget_sqlx_version: include_str!("../sql/postgres/forget_sqlx_version.sql"),
        history: include_str!("../sql/postgres/history.sql"),
        has_sqlx_history: include_str!("../sql/postgres/has_sqlx_history.sql"),
        // The lock for the transaction, with no timeouts: migrations may wait for another
        // instance's run and take longer than requests may.
        begin_migration: Some(include_str!("../sql/postgres/begin_migration.sql")),
        lock_migrations: None,
        unlock_migrations: None,
    },
};

impl Backend for Postgres {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
    }
    const SQL: Sql = SQL;
    const DIALECT: Dialect = Dialect {
        lock_first: true,
        ..Dialect::NUMBERED
    };

    fn connect_options(url: &str, _settings: &TxSettings) -> Result<PgConnectOptions, sqlx::Error> {
        let mut options = PgConnectOptions::from_str(url)?;
        if options.get_application_name().is_none() {
            options = options.application_name("idem");
        }
        // idem's statements carry keys, tenants and response bodies: never logged.
        options = options.disable_statement_logging();
        if crate::pooler::is_behind_transaction_pooler() {
            // PgBouncer refuses startup parameters it does not track (see `crate::pooler`).
            return Ok(options.extra_float_digits(None));
        }
        // No session-wide timeouts: each transaction of idem's sets its own (`begin`). A
        // statement whose client stopped waiting (the runtime's deadline on its lookup) is
        // cancelled within a second instead of holding a server process until it ends.
        Ok(options.options([("client_connection_check_interval", "1000")]))
    }

    async fn open(
        url: &str,
        options: PoolOptions<Self>,
        settings: &TxSettings,
    ) -> Result<sqlx::PgPool, sqlx::Error> {
        if !HostList::is_host_list(url) {
            return options
                .connect_with(Self::connect_options(url, settings)?)
                .await;
        }
        HostList::parse(url, |url| Self::connect_options(url, settings))?
            .pool(options)
            .await
    }

    fn pool_options(options: PoolOptions<Self>) -> PoolOptions<Self> {
        // Pinged after `IDLE_PING_AFTER` idle: the application's queries meet no dead one either.
        options.before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for < IDLE_PING_AFTER {
                    return Ok(true);
                }
                conn.ping().await.map(|()| true)
            })
        })
    }

    async fn begin<'c>(
        conn: &'c mut PgConnection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        // One round trip: the simple-query protocol takes several statements.
        let mut statement = Self::begin_statement(settings);
        if let Some(lock) = lock {
            // The advisory lock and the look again, in one call (migration 2; migration 7
            // takes a free lock without a query of its own).
            let _ = write!(
                statement,
                "; SELECT idem_lock_key({}, ",
                lock_id(lock.namespace, lock.key)
            );
            for text in [lock.key.scope, lock.key.operation, lock.key.key] {
                push_text(&mut statement, text);
                statement.push_str(", ");
            }
            match lock.expired_by_ms {
                None => statement.push_str("NULL)"),
                Some(ms) => {
                    let _ = write!(statement, "to_timestamp({ms}::float8 / 1000))");
                }
            }
        }
        // A taken key fails the statement: `Failure::Taken`.
        Transaction::begin(conn, Some(statement.into()))
            .await
            .map(Begun::Free)
    }

    fn begin_statement(settings: &TxSettings) -> String {
        format!(
            "BEGIN; SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}",
            settings.lock_timeout.as_millis().max(1),
            settings.statement_timeout.as_millis().max(1),
        )
    }

    async fn abandon_begin(conn: &mut PgConnection) {
        // `BEGIN` went through and a later statement failed: an aborted transaction.
        if let Err(error) = Self::batch(conn, "ROLLBACK").await {
            tracing::warn!(%error, "could not roll back after a failed BEGIN");
        }
    }

    fn insert_and_commit(row: &NewRow<'_>) -> Option<String> {
        Some(insert_and_commit_statement(row))
    }

    fn is_duplicate(error: &sqlx::Error) -> bool {
        error.as_database_error().is_some_and(|e| {
            e.code().is_some_and(|code| code == "23505")
                && e.constraint() == Some("idempotency_keys_pkey")
        })
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::protocol::is_connection_error(error) {
            return Failure::Disconnected;
        }
        match error.as_database_error().and_then(|e| e.code()) {
            // lock_not_available (lock_timeout), query_canceled (statement_timeout)
            Some(code) if code == "55P03" || code == "57014" => Failure::LockTimeout,
            // raised by `idem_lock_key`
            Some(code) if code == "IK001" => Failure::Taken,
            // connection_exception; admin_shutdown, crash_shutdown, cannot_connect_now;
            // idle_in_transaction_session_timeout, transaction_timeout (the server ended the
            // session); internal errors: the session is gone or cannot be trusted.
            Some(code)
                if code.starts_with("08")
                    || code.starts_with("57P")
                    || code == "25P03"
                    || code == "25P04"
                    || code.starts_with("XX") =>
            {
                Failure::Disconnected
            }
            _ => Failure::Other,
        }
    }

    async fn key_lock_taken(
        conn: &mut PgConnection,
        lock: KeyLock<'_>,
    ) -> Result<bool, sqlx::Error> {
        // Outside a transaction the lock, if taken, is released as the statement ends.
        let id = [Arg::Int(lock_id(lock.namespace, lock.key))];
        let sql = SQL.keys.key_lock_taken.unwrap_or_default();
        let row = Self::fetch_optional(conn, sql, &id).await?;
        let free = row.map(|row| Self::flag(&row, 0)).transpose()?;
        Ok(free == Some(false))
    }

    /// The key's lock's derivation, with the attempt's reservation and number as more parts.
    fn hold_id(namespace: &str, key: KeyRef<'_>, fence: Fence) -> i64 {
        let reservation = fence.reservation.to_string();
        let attempt = fence.attempt.to_string();
        advisory_id(&[
            namespace,
            key.scope,
            key.operation,
            key.key,
            "reservation",
            &reservation,
            "attempt",
            &attempt,
        ])
    }
}

/// `INSERT` of the completed row, `COMMIT`, `BEGIN`, as one simple query: one round trip
/// where a bound `INSERT` and then `COMMIT` take two. The `INSERT` has no `ON CONFLICT`: a
/// row that exists already fails it, which aborts the transaction and skips the `COMMIT`.
///
/// The simple-query protocol takes no parameters, so every value is written as a literal:
/// numbers as decimal digits, text and bytes as hexadecimal escapes. Nothing from the request
/// reaches the statement except as hexadecimal digits.
fn insert_and_commit_statement(row: &NewRow<'_>) -> String {
    let text_len =
        row.key.scope.len() + row.key.operation.len() + row.key.key.len() + row.headers_json.len();
    // Text takes four characters a byte (`\xHH`), bytes two.
    let bytes_len =
        row.fingerprint.len() + row.body.len() + row.field_digests.map_or(0, <[u8]>::len);
    let mut sql = String::with_capacity(512 + 4 * text_len + 2 * bytes_len);
    sql.push_str(
        "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
         response_status, response_headers, response_body, created_at, completed_at, \
         expires_at, field_digests) VALUES (",
    );
    for text in [row.key.scope, row.key.operation, row.key.key] {
        push_text(&mut sql, text);
        sql.push_str(", ");
    }
    push_bytes(&mut sql, row.fingerprint);
    let _ = write!(sql, ", 'completed', {}, ", row.status);
    push_text(&mut sql, row.headers_json);
    sql.push_str(", ");
    push_bytes(&mut sql, row.body);
    sql.push_str(", ");
    for (ms, end) in [
        (row.created_ms, ", "),
        (row.completed_ms, ", "),
        (row.expires_ms, ", "),
    ] {
        let _ = write!(sql, "to_timestamp({ms}::float8 / 1000){end}");
    }
    match row.field_digests {
        Some(digests) => push_bytes(&mut sql, digests),
        None => sql.push_str("NULL"),
    }
    sql.push_str("); COMMIT; BEGIN");
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(scope: &str, operation: &str, key: &str) -> i64 {
        lock_id(
            "public",
            KeyRef {
                scope,
                operation,
                key,
            },
        )
    }

    #[test]
    fn lock_ids_are_stable_across_versions() {
        // Processes of two versions must agree on it during a rolling deploy: never change it.
        assert_eq!(
            id("tenant:t1", "create_order:v1", "k-1"),
            LOCK_ID_TENANT_T1_K1
        );
    }

    #[test]
    fn migrations_take_the_documented_lock() {
        let begin = SQL
            .migrations
            .begin_migration
            .unwrap_or_default()
            .trim_end();
        let lock = format!("pg_advisory_xact_lock({})", crate::MIGRATION_LOCK_ID);
        assert!(begin.ends_with(&lock), "{begin}");
    }

    #[test]
    fn lock_ids_keep_the_parts_apart() {
        assert_ne!(id("ab", "c", "d"), id("a", "bc", "d"));
        assert_ne!(id("a", "b", "cd"), id("a", "bc", "d"));
        assert_ne!(id("global", "op:v1", "k"), id("global", "op:v2", "k"));
        let key = KeyRef {
            scope: "global",
            operation: "op:v1",
            key: "k",
        };
        assert_ne!(lock_id("public", key), lock_id("shop", key));
    }

    // Computed independently: SHA-256 over the length-prefixed parts, first 8 bytes LE.
    const LOCK_ID_TENANT_T1_K1: i64 = 3_618_639_434_383_866_314;
}
