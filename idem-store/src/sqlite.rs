//! SQLite: the embedded default, for one process. Its timestamps are told with
//! [the key table](crate#the-key-table), its key's lock (the database's write lock, taken by
//! `BEGIN IMMEDIATE`) in [the key's lock](crate#the-keys-lock).

use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions as _, Sqlite};

use crate::backend::{Backend, begin_write, look_again};
use crate::glue::prefix_pattern;
use crate::migration::{Migration, migration};
use crate::protocol::{Begun, Failure, KeyLock, TxSettings};
use crate::sql::{
    Claim, InboxSql, KeySql, MigrationSql, OperatorSql, OutboxSql, Sql, StagedSql, ToolSql,
};

/// The migrations of the key table on SQLite ([migrations](crate#migrations): no version 7).
static MIGRATIONS: [Migration; 11] = [
    migration!(1, "sqlite/0001_idempotency_keys.sql", "idempotency_keys",
        present: "SELECT count(expires_at) FROM idempotency_keys WHERE 1 = 0"),
    migration!(2, "sqlite/0002_staged.sql", "staged mode and the audit trail",
        present: "SELECT count(k.request) + count(a.reason) FROM idempotency_keys k, \
                  idempotency_audit a WHERE 1 = 0"),
    migration!(3, "sqlite/0003_outbox.sql", "idempotency_outbox",
        present: "SELECT count(delivered_at) FROM idempotency_outbox WHERE 1 = 0"),
    migration!(4, "sqlite/0004_operations.sql", "idempotency_operations",
        present: "SELECT count(lease_ms) FROM idempotency_operations WHERE 1 = 0"),
    migration!(5, "sqlite/0005_processing.sql", "idempotency_processing",
        present: "SELECT 1 FROM sqlite_master WHERE type = 'trigger' \
                  AND name = 'idempotency_processing_deleted' \
                  AND EXISTS (SELECT count(*) FROM idempotency_processing WHERE 1 = 0)"),
    migration!(6, "sqlite/0006_operation_docs.sql", "the documents of registered operations",
        present: "SELECT count(doc) FROM idempotency_operations WHERE 1 = 0"),
    migration!(8, "sqlite/0008_audit_forced.sql", "forced operator actions in the audit trail",
        present: "SELECT count(forced) FROM idempotency_audit WHERE 1 = 0"),
    migration!(9, "sqlite/0009_reservation.sql", "staged attempts fenced on their reservation",
        present: "SELECT count(reservation) FROM idempotency_keys WHERE 1 = 0"),
    migration!(10, "sqlite/0010_inbox.sql", "the inbox of events not applied",
        present: "SELECT count(first_seen_at) FROM idempotency_inbox WHERE 1 = 0"),
    migration!(11, "sqlite/0011_field_digests.sql", "the digests of a key's request fields",
        present: "SELECT count(field_digests) FROM idempotency_keys WHERE 1 = 0"),
    migration!(12, "sqlite/0012_inbox_unparseable.sql", "unparseable events in the inbox",
        present: "SELECT 1 FROM sqlite_master WHERE type = 'table' \
                  AND name = 'idempotency_inbox' AND sql LIKE '%unparseable%'"),
];

/// Every statement SQLite is sent ([`Sql`] says what each does).
const SQL: Sql = Sql {
    keys: KeySql {
        lookup: include_str!("../sql/sqlite/lookup.sql"),
        expires_at: include_str!("../sql/sqlite/expires_at.sql"),
        insert_completed: include_str!("../sql/sqlite/insert_completed.sql"),
        insert_completed_or_replace_expired: include_str!(
            "../sql/sqlite/insert_completed_or_replace_expired.sql"
        ),
        field_digests: include_str!("../sql/sqlite/field_digests.sql"),
        // Another process's migration or operator action waits at `BEGIN`, then sees what it did.
        begin_write: Some(include_str!("../sql/sqlite/begin_write.sql")),
        namespace: None,
        session_id: None,
        last_insert_id: None,
        key_lock_taken: None,
    },
    tools: ToolSql {
        get: include_str!("../sql/sqlite/get.sql"),
        // No `FOR UPDATE` on SQLite: its transactions that write hold the database (`begin_write`).
        get_for_update: include_str!("../sql/sqlite/get.sql"),
        list: include_str!("../sql/sqlite/list.sql"),
        list_completed: include_str!("../sql/sqlite/list_completed.sql"),
        list_expired: include_str!("../sql/sqlite/list_expired.sql"),
        list_processing: include_str!("../sql/sqlite/list_processing.sql"),
        list_stuck: include_str!("../sql/sqlite/list_stuck.sql"),
        expire: include_str!("../sql/sqlite/expire.sql"),
        delete: include_str!("../sql/sqlite/delete.sql"),
        sweep: include_str!("../sql/sqlite/sweep.sql"),
        count_sweepable: include_str!("../sql/sqlite/count_sweepable.sql"),
        counts: include_str!("../sql/sqlite/counts.sql"),
        table_bytes: include_str!("../sql/sqlite/table_bytes.sql"),
        register: include_str!("../sql/sqlite/register.sql"),
        registrations: include_str!("../sql/sqlite/registrations.sql"),
    },
    operator: OperatorSql {
        release: include_str!("../sql/sqlite/release.sql"),
        complete: include_str!("../sql/sqlite/complete.sql"),
        delete_only: include_str!("../sql/sqlite/delete_only.sql"),
        insert_audit: include_str!("../sql/sqlite/insert_audit.sql"),
        audit: include_str!("../sql/sqlite/audit.sql"),
        journal: include_str!("../sql/sqlite/journal.sql"),
        begin_batch: Some(include_str!("../sql/sqlite/begin_write.sql")),
        reseal_first: include_str!("../sql/sqlite/reseal_first.sql"),
        reseal_next: include_str!("../sql/sqlite/reseal_next.sql"),
        reseal: include_str!("../sql/sqlite/reseal.sql"),
    },
    staged: StagedSql {
        reserve: include_str!("../sql/sqlite/reserve.sql"),
        reserve_or_replace_expired: include_str!("../sql/sqlite/reserve_or_replace_expired.sql"),
        reserve_held: None,
        hold: None,
        let_go: None,
        owner_gone: None,
        clear_expired: None,
        reopen_expired: None,
        sweep_locks: None,
        lease_of: include_str!("../sql/sqlite/lease_of.sql"),
        take_over: include_str!("../sql/sqlite/take_over.sql"),
        renew: include_str!("../sql/sqlite/renew.sql"),
        step: include_str!("../sql/sqlite/step.sql"),
        finish: include_str!("../sql/sqlite/finish.sql"),
        give_back: include_str!("../sql/sqlite/give_back.sql"),
        stuck: include_str!("../sql/sqlite/stuck.sql"),
    },
    outbox: OutboxSql {
        enqueue: include_str!("../sql/sqlite/enqueue.sql"),
        claim: Claim::Returning(include_str!("../sql/sqlite/claim.sql")),
        mark_delivered: include_str!("../sql/sqlite/mark_delivered.sql"),
        mark_failed: include_str!("../sql/sqlite/mark_failed.sql"),
        outbox_get: include_str!("../sql/sqlite/outbox_get.sql"),
        outbox_find: include_str!("../sql/sqlite/outbox_find.sql"),
        outbox_find_for_update: include_str!("../sql/sqlite/outbox_find.sql"),
        outbox_list: include_str!("../sql/sqlite/outbox_list.sql"),
        outbox_list_status: include_str!("../sql/sqlite/outbox_list_status.sql"),
        outbox_counts: include_str!("../sql/sqlite/outbox_counts.sql"),
        outbox_retry: include_str!("../sql/sqlite/outbox_retry.sql"),
        outbox_retryable: include_str!("../sql/sqlite/outbox_retryable.sql"),
        sweep_delivered: include_str!("../sql/sqlite/sweep_delivered.sql"),
        outbox_reseal_batch: include_str!("../sql/sqlite/outbox_reseal_batch.sql"),
        outbox_reseal: include_str!("../sql/sqlite/outbox_reseal.sql"),
    },
    inbox: InboxSql {
        inbox_note: include_str!("../sql/sqlite/inbox_note.sql"),
        inbox_first_seen: include_str!("../sql/sqlite/inbox_first_seen.sql"),
        inbox_remove: include_str!("../sql/sqlite/inbox_remove.sql"),
        inbox_list: include_str!("../sql/sqlite/inbox_list.sql"),
        inbox_list_status: include_str!("../sql/sqlite/inbox_list_status.sql"),
        inbox_get: include_str!("../sql/sqlite/inbox_get.sql"),
        inbox_reseal_batch: include_str!("../sql/sqlite/inbox_reseal_batch.sql"),
        inbox_reseal: include_str!("../sql/sqlite/inbox_reseal.sql"),
    },
    migrations: MigrationSql {
        applied_one: include_str!("../sql/sqlite/applied_one.sql"),
        record: include_str!("../sql/sqlite/record.sql"),
        forget_sqlx_version: include_str!("../sql/sqlite/forget_sqlx_version.sql"),
        history: include_str!("../sql/sqlite/history.sql"),
        has_sqlx_history: include_str!("../sql/sqlite/has_sqlx_history.sql"),
        begin_migration: Some(include_str!("../sql/sqlite/begin_write.sql")),
        lock_migrations: None,
        unlock_migrations: None,
    },
};

impl Backend for Sqlite {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
    }
    const SQL: Sql = SQL;

    /// `GLOB`, not `LIKE`: SQLite's `LIKE` ignores ASCII case.
    fn key_prefix(prefix: &str) -> (&'static str, &'static str, String) {
        (" AND idempotency_key GLOB ", "", glob_prefix(prefix))
    }

    fn connect_options(
        url: &str,
        settings: &TxSettings,
    ) -> Result<SqliteConnectOptions, sqlx::Error> {
        Ok(SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(settings.lock_timeout)
            // idem's statements carry keys, tenants and response bodies: never logged.
            .disable_statement_logging())
    }

    async fn begin<'c>(
        conn: &'c mut SqliteConnection,
        _settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        let tx = begin_write::<Self>(conn).await?;
        let Some(lock) = lock else {
            return Ok(Begun::Free(tx));
        };
        // Look again, under the lock: in-process, no round trip.
        look_again(tx, lock).await
    }

    fn begin_statement(_settings: &TxSettings) -> String {
        // The connection's `busy_timeout` bounds the transaction's waits.
        "BEGIN".to_owned()
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::protocol::is_connection_error(error) {
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
        if busy {
            Failure::LockTimeout
        } else {
            Failure::Other
        }
    }
}

/// A `GLOB` pattern for keys starting with `prefix`: its wildcards (`*`, `?`, `[`) each in a
/// bracket of their own.
fn glob_prefix(prefix: &str) -> String {
    prefix_pattern(prefix, '*', |c, pattern| {
        if matches!(c, '*' | '?' | '[') {
            pattern.extend(['[', c, ']']);
        } else {
            pattern.push(c);
        }
    })
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
