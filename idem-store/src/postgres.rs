//! PostgreSQL: the store for several application instances sharing one database.
//!
//! Timestamps are `timestamptz`; they cross the wire as milliseconds since the epoch so that
//! the caller's clock decides what "now" is. An execution holds its key with a
//! transaction-scoped advisory lock taken in the same round trip as `BEGIN`; lock waits are
//! bounded by `lock_timeout`, set in the startup packet of pools idem opens and with
//! `SET LOCAL` (in that same round trip) on pools the application brings.

use std::fmt::Write as _;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgRow};
use sqlx::{
    ConnectOptions as _, Connection as _, Executor as _, Pool, Postgres, QueryBuilder, Row as _,
    Transaction,
};

use crate::backend::{Backend, Begun, Failure, KeyLock, NewRow, TxSettings};
use crate::error::StoreError;
use crate::key::KeyRef;
use crate::list::{self, Counts, KeyFilter, Page};
use crate::migrate::{LEGACY_SQLX_VERSION, MIGRATION_LOCK_ID};
use crate::migration::Migration;
use crate::operator::{self, Acted, Action, Actor};
use crate::row::{KeyRow, KeyStatus, RawRow, StoredKey, StoredResponse, StoredStatus};
use crate::sealed;

/// The migrations of the key table on PostgreSQL.
static MIGRATIONS: [Migration; 8] = [
    Migration::new(
        1,
        "idempotency_keys",
        include_str!("../migrations/postgres/0001_idempotency_keys.sql"),
    ),
    Migration::new(
        2,
        "staged mode and the audit trail",
        include_str!("../migrations/postgres/0002_staged.sql"),
    ),
    Migration::new(
        3,
        "idempotency_outbox",
        include_str!("../migrations/postgres/0003_outbox.sql"),
    ),
    Migration::new(
        4,
        "idempotency_operations",
        include_str!("../migrations/postgres/0004_operations.sql"),
    ),
    Migration::new(
        5,
        "idempotency_processing",
        include_str!("../migrations/postgres/0005_processing.sql"),
    ),
    Migration::new(
        6,
        "the documents of registered operations",
        include_str!("../migrations/postgres/0006_operation_docs.sql"),
    ),
    Migration::new(
        7,
        "the key's lock without a second query when it is free",
        include_str!("../migrations/postgres/0007_lock_key_fast_path.sql"),
    ),
    Migration::new(
        8,
        "forced operator actions in the audit trail",
        include_str!("../migrations/postgres/0008_audit_forced.sql"),
    ),
];

/// How long a pooled connection may sit idle before it is pinged on its next use.
const IDLE_PING_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// `now_ms` as a `timestamptz` in a listing.
fn push_now(query: &mut QueryBuilder<'_, Postgres>, now_ms: i64) {
    query
        .push(sql::NOW_TS.0)
        .push_bind(now_ms)
        .push(sql::NOW_TS.1);
}

/// The advisory lock that stands for a key while an execution of it runs: the first eight
/// bytes of SHA-256 over the length-prefixed schema of the key table (advisory locks are per
/// database, keys per table), scope, operation and key. Distinct keys sharing a lock id (odds
/// 2^-64 per pair) only wait for each other; the primary key still keeps them apart.
fn lock_id(namespace: &str, key: KeyRef<'_>) -> i64 {
    advisory_id(&[namespace, key.scope, key.operation, key.key])
}

/// An advisory lock id: the first eight bytes of SHA-256 over the length-prefixed `parts`.
pub(crate) fn advisory_id(parts: &[&str]) -> i64 {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

mod sql {
    /// A `timestamptz` column in milliseconds since the epoch.
    macro_rules! ms {
        ($column:literal) => {
            concat!("(extract(epoch FROM ", $column, ") * 1000)::int8")
        };
    }

    /// Every column of a key row, in the order `raw` reads them.
    macro_rules! columns {
        () => {
            concat!(
                "scope, operation, idempotency_key, fingerprint, status, response_status, \
                 response_headers, response_body, ",
                ms!("created_at"),
                ", ",
                ms!("completed_at"),
                ", ",
                ms!("expires_at"),
                ", ",
                ms!("locked_until"),
                ", attempt, recovery_point"
            )
        };
    }

    pub(super) const LOOKUP: &str = "SELECT fingerprint, status, response_status, \
         response_headers, response_body, \
         (extract(epoch FROM expires_at) * 1000)::int8 AS expires_at_ms, \
         (extract(epoch FROM locked_until) * 1000)::int8 AS locked_until_ms, attempt \
         FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3";

    /// The completed row, inserted once the handler has run; nothing if the key exists.
    pub(super) const INSERT_COMPLETED: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, response_status, \
         response_headers, response_body, created_at, completed_at, expires_at) \
         VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp($8::float8 / 1000), \
         to_timestamp($9::float8 / 1000), to_timestamp($10::float8 / 1000)) \
         ON CONFLICT (scope, operation, idempotency_key) DO NOTHING";

    /// The same, overwriting a completed row that had expired when the execution began; a
    /// processing row is never replaced (`KeyStatus::at`: a key that is not final never
    /// expires).
    pub(super) const INSERT_COMPLETED_OR_REPLACE_EXPIRED: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, response_status, \
         response_headers, response_body, created_at, completed_at, expires_at) \
         VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp($8::float8 / 1000), \
         to_timestamp($9::float8 / 1000), to_timestamp($10::float8 / 1000)) \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET \
         fingerprint = EXCLUDED.fingerprint, status = 'completed', \
         response_status = EXCLUDED.response_status, \
         response_headers = EXCLUDED.response_headers, \
         response_body = EXCLUDED.response_body, created_at = EXCLUDED.created_at, \
         completed_at = EXCLUDED.completed_at, expires_at = EXCLUDED.expires_at \
         WHERE idempotency_keys.status = 'completed' \
         AND idempotency_keys.expires_at <= EXCLUDED.created_at";

    pub(super) const SAVEPOINT: &str = "SAVEPOINT idem_handler";
    pub(super) const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT idem_handler";

    /// Small batches, skipping rows a running request holds: no long locks. Expired keys
    /// only (`KeyStatus::at`): completed rows past `expires_at`, never a processing row.
    pub(super) const SWEEP: &str = "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(\
         SELECT ctid FROM idempotency_keys WHERE status = 'completed' \
         AND expires_at <= to_timestamp($1::float8 / 1000) \
         LIMIT $2 FOR UPDATE SKIP LOCKED))";

    /// Keys `SWEEP` deletes at this `before`, in all its batches.
    pub(super) const COUNT_SWEEPABLE: &str = "SELECT count(*) FROM idempotency_keys \
         WHERE status = 'completed' AND expires_at <= to_timestamp($1::float8 / 1000)";

    pub(super) const REGISTER: &str = "INSERT INTO idempotency_operations \
         (operation, scope, ttl_ms, mode, lease_ms, doc, registered_at) \
         VALUES ($1, $2, $3, $4, $5, $7, to_timestamp($6::float8 / 1000)) \
         ON CONFLICT (operation) DO UPDATE SET scope = excluded.scope, \
         ttl_ms = excluded.ttl_ms, mode = excluded.mode, lease_ms = excluded.lease_ms, \
         doc = excluded.doc, registered_at = excluded.registered_at";

    pub(super) const REGISTRATIONS: &str = concat!(
        "SELECT operation, scope, ttl_ms, mode, lease_ms, doc, ",
        ms!("registered_at"),
        " FROM idempotency_operations ORDER BY operation"
    );

    pub(super) const GET: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3"
    );

    pub(super) const GET_FOR_UPDATE: &str = concat!(
        "SELECT ",
        columns!(),
        " FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
         FOR UPDATE"
    );

    /// Processing and stuck keys are looked for in `idempotency_processing`, which holds
    /// staged mode's processing keys only, instead of among all keys.
    pub(super) const IN_PROCESSING: &str = " AND (scope, operation, idempotency_key) IN \
         (SELECT scope, operation, idempotency_key FROM idempotency_processing)";

    /// The start of a listing; the filters follow as `AND …`.
    pub(super) const LIST: &str =
        concat!("SELECT ", columns!(), " FROM idempotency_keys WHERE TRUE");

    /// `$1` milliseconds as a `timestamptz`.
    macro_rules! AT_1 {
        () => {
            "to_timestamp($1::float8 / 1000)"
        };
    }

    /// A listing's `now_ms` parameter as a `timestamptz`: the filters compare the columns
    /// themselves with it, so that indexes on them serve the comparison.
    pub(super) const NOW_TS: (&str, &str) = ("to_timestamp(", "::float8 / 1000)");

    /// Expiry now, never later than it was.
    pub(super) const EXPIRE: &str = concat!(
        "UPDATE idempotency_keys SET expires_at = to_timestamp($4::float8 / 1000) \
         WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 AND ",
        ms!("expires_at"),
        " > $4 RETURNING ",
        columns!()
    );

    pub(super) const DELETE: &str = concat!(
        "DELETE FROM idempotency_keys \
         WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 RETURNING ",
        columns!()
    );

    /// Keys per operation and state (`KeyStatus::at`, in SQL: only a completed row expires;
    /// a processing row is stuck once its lease ran out, whatever `expires_at` says), with
    /// the earliest `created_at` of each group (the stuck groups' give the oldest stuck key).
    pub(super) const COUNTS: &str = concat!(
        "SELECT operation, CASE WHEN status = 'completed' AND expires_at <= ",
        AT_1!(),
        " THEN 'expired' WHEN status = 'processing' AND locked_until <= ",
        AT_1!(),
        " THEN 'stuck' ELSE status END AS state, count(*), ",
        ms!("min(created_at)"),
        " FROM idempotency_keys GROUP BY 1, 2"
    );

    pub(super) const TABLE_BYTES: &str =
        "SELECT pg_total_relation_size(to_regclass('idempotency_keys'))";

    // Operator actions, each run in the transaction that read the row `FOR UPDATE`.

    /// The lease run out now, and the running attempt, if any, fenced out.
    pub(super) const RELEASE: &str = concat!(
        "UPDATE idempotency_keys \
         SET attempt = attempt + 1, locked_until = to_timestamp($4::float8 / 1000) \
         WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 RETURNING ",
        columns!()
    );

    /// Completed with the operator's response, the running attempt fenced out, its TTL
    /// counted from now: the operation's registered `ttl_ms`, or for an operation not in
    /// the registry the row's own (`expires_at - created_at`, what its reservation set).
    pub(super) const COMPLETE: &str = concat!(
        "UPDATE idempotency_keys SET status = 'completed', response_status = $4, \
         response_headers = $5, response_body = $6, \
         completed_at = to_timestamp($7::float8 / 1000), \
         expires_at = to_timestamp(($7::int8 + COALESCE(\
         (SELECT ttl_ms FROM idempotency_operations WHERE operation = $2), \
         GREATEST(",
        ms!("expires_at"),
        " - ",
        ms!("created_at"),
        ", 0)))::float8 / 1000), locked_until = NULL, attempt = attempt + 1 \
         WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 RETURNING ",
        columns!()
    );

    pub(super) const DELETE_ONLY: &str = "DELETE FROM idempotency_keys \
         WHERE scope = $1 AND operation = $2 AND idempotency_key = $3";

    pub(super) const INSERT_AUDIT: &str = "INSERT INTO idempotency_audit \
         (at, operator, scope, operation, idempotency_key, action, reason, before, after, forced) \
         VALUES (to_timestamp($1::float8 / 1000), $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id";

    /// The start of a reading of the audit trail; the filters follow as `AND …`.
    pub(super) const AUDIT: &str = concat!(
        "SELECT id, ",
        ms!("at"),
        ", operator, scope, operation, idempotency_key, action, reason, before, after, \
         forced FROM idempotency_audit WHERE TRUE"
    );

    pub(super) const JOURNAL: &str = "SELECT recovery_point, journal, request \
         FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3";

    // The migration runner.

    /// Migrations may wait for another instance's run and take longer than requests may.
    pub(super) const MIGRATION_SESSION: &str = "SET lock_timeout = 0; SET statement_timeout = 0";
    pub(super) const MIGRATION_LOCK: &str = "SELECT pg_advisory_lock($1)";
    pub(super) const MIGRATION_UNLOCK: &str = "SELECT pg_advisory_unlock($1)";
    /// Back to the session's defaults (the startup packet's, for pools idem opened).
    pub(super) const MIGRATION_SESSION_RESET: &str = "RESET lock_timeout; RESET statement_timeout";

    pub(super) const HISTORY: &str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
         version     BIGINT      PRIMARY KEY, \
         description TEXT        NOT NULL, \
         checksum    BYTEA       NOT NULL, \
         applied_at  TIMESTAMPTZ NOT NULL DEFAULT now())";
    pub(super) const APPLIED: &str =
        "SELECT version, checksum FROM idem_schema_migrations ORDER BY version";
    pub(super) const RECORD: &str = "INSERT INTO idem_schema_migrations \
         (version, description, checksum) VALUES ($1, $2, $3)";
    /// Whether idem 0.1's history (sqlx's) is in the schema unqualified names go to.
    pub(super) const HAS_SQLX_HISTORY: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
         WHERE schemaname = current_schema() AND tablename = '_sqlx_migrations')";
    pub(super) const FORGET_SQLX_VERSION: &str = "DELETE FROM _sqlx_migrations WHERE version = $1";
}

/// A key row's columns, in the order of `sql::columns!`.
fn raw(row: &PgRow) -> Result<RawRow, sqlx::Error> {
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

fn key_row(row: &PgRow, now_ms: i64) -> Result<KeyRow, StoreError> {
    raw(row)?.into_row(now_ms)
}

/// `statement` with the key's three parts bound as its first three parameters (scope,
/// operation, key).
fn by_key<'q>(
    statement: &'q str,
    key: KeyRef<'q>,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(statement)
        .bind(key.scope)
        .bind(key.operation)
        .bind(key.key)
}

impl Backend for Postgres {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
    }

    async fn connect(
        url: &str,
        max_connections: u32,
        settings: &TxSettings,
    ) -> Result<Pool<Self>, sqlx::Error> {
        let mut options = PgConnectOptions::from_str(url)?;
        if options.get_application_name().is_none() {
            options = options.application_name("idem");
        }
        // No session-wide timeouts: each transaction of idem's sets its own (`begin`). A
        // statement whose client stopped waiting (the runtime's deadline on its lookup) is
        // cancelled within a second instead of holding a server process until it ends.
        let options = options
            .options([("client_connection_check_interval", "1000")])
            // idem's statements carry keys, tenants and response bodies: never logged.
            .disable_statement_logging();
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(settings.acquire_timeout)
            // A connection that sat idle for a while may have died with a database restart:
            // pinged before use (a busy pool's connections never are), so that the
            // application's own queries do not meet it either.
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < IDLE_PING_AFTER {
                        return Ok(true);
                    }
                    conn.ping().await.map(|()| true)
                })
            })
            // A dead connection fails its query (answered 503, retry with the same key)
            // instead of costing every request a ping round trip.
            .test_before_acquire(false)
            .connect_with(options)
            .await
    }

    async fn lookup(
        conn: &mut PgConnection,
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

    async fn namespace(conn: &mut PgConnection) -> Result<String, sqlx::Error> {
        sqlx::query_scalar("SELECT current_schema()")
            .fetch_one(conn)
            .await
    }

    async fn begin<'c>(
        conn: &'c mut PgConnection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        // One round trip: the simple-query protocol takes several statements. The timeouts
        // are the transaction's own: the application's queries on the pool keep theirs.
        let mut statement = Self::begin_statement(settings);
        if let Some(lock) = lock {
            // The advisory lock and the look again, in one call (migration 2; migration 7 takes a
            // free lock without a query of its own).
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
        // A taken key fails the statement (`IK001`, which `classify` calls
        // `Failure::Taken`): the caller repairs the connection with `abandon_begin`, as after
        // any failed `BEGIN`.
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
        // `BEGIN` went through and a later statement failed: the session is in an aborted
        // transaction. If even this fails the connection is broken, and its next use says so.
        if let Err(error) = conn.execute("ROLLBACK").await {
            tracing::warn!(%error, "could not roll back after a failed BEGIN");
        }
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
        row: NewRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        let statement = insert_and_commit_statement(&row);
        // A query without arguments goes out as one simple query, several statements and all.
        match tx.execute(statement.as_str()).await {
            // Dropping `tx` rolls back the empty transaction the statement opened last; the
            // `ROLLBACK` goes out with the connection's next message (the pool's release
            // ping), so sqlx's view of the connection and the server's agree again.
            Ok(_) => Ok(true),
            // The key's row exists: the `INSERT` failed, the transaction is aborted, the
            // `COMMIT` skipped, and dropping `tx` rolls back.
            Err(error) if is_unique_violation(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::backend::is_connection_error(error) {
            return Failure::Disconnected;
        }
        match error.as_database_error().and_then(|e| e.code()) {
            // lock_not_available (lock_timeout), query_canceled (statement_timeout)
            Some(code) if code == "55P03" || code == "57014" => Failure::LockTimeout,
            // raised by `idem_lock_key`
            Some(code) if code == "IK001" => Failure::Taken,
            // connection_exception; admin_shutdown, crash_shutdown, cannot_connect_now;
            // internal errors: the session is gone or cannot be trusted.
            Some(code)
                if code.starts_with("08") || code.starts_with("57P") || code.starts_with("XX") =>
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
        let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(lock_id(lock.namespace, lock.key))
            .fetch_one(conn)
            .await?;
        Ok(!free)
    }
}

impl sealed::Sealed for Postgres {
    async fn run_migrations(pool: &Pool<Self>) -> Result<(), StoreError> {
        let mut session = MigrationSession {
            conn: pool.acquire().await?,
            clean: false,
        };
        session.conn.execute(sql::MIGRATION_SESSION).await?;
        sqlx::query(sql::MIGRATION_LOCK)
            .bind(MIGRATION_LOCK_ID)
            .execute(&mut *session.conn)
            .await?;
        let result = apply_migrations(&mut session.conn).await;
        // Dropping a failed migration's transaction queued its `ROLLBACK`; it goes out first.
        let released = async {
            sqlx::query(sql::MIGRATION_UNLOCK)
                .bind(MIGRATION_LOCK_ID)
                .execute(&mut *session.conn)
                .await?;
            session.conn.execute(sql::MIGRATION_SESSION_RESET).await
        }
        .await;
        match released {
            Ok(_) => session.clean = true,
            // The connection is closed instead of pooled: that releases the lock too.
            Err(error) => tracing::warn!(%error, "could not release the migration lock"),
        }
        result
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
        let mut query = QueryBuilder::<Postgres>::new(sql::LIST);
        match filter.status {
            None => {}
            Some(KeyStatus::Completed) => {
                query.push(" AND status = 'completed' AND expires_at > ");
                push_now(&mut query, now_ms);
            }
            Some(KeyStatus::Expired) => {
                query.push(" AND status = 'completed' AND expires_at <= ");
                push_now(&mut query, now_ms);
            }
            Some(KeyStatus::Processing) => {
                query.push(sql::IN_PROCESSING);
                query.push(
                    " AND status = 'processing' AND (locked_until IS NULL OR locked_until > ",
                );
                push_now(&mut query, now_ms);
                query.push(")");
            }
            Some(KeyStatus::Stuck) => {
                query.push(sql::IN_PROCESSING);
                query.push(" AND status = 'processing' AND locked_until <= ");
                push_now(&mut query, now_ms);
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
            query
                .push(" AND idempotency_key LIKE ")
                .push_bind(like_prefix(prefix))
                .push(" ESCAPE '!'");
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
        let mut tx = pool.begin().await?;
        let before = by_key(sql::GET_FOR_UPDATE, key)
            .fetch_optional(&mut *tx)
            .await?;
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
        let bytes: Option<i64> = sqlx::query_scalar(sql::TABLE_BYTES).fetch_one(pool).await?;
        counts.table_bytes = bytes.map(list::count);
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
        let mut tx = pool.begin().await?;
        // The row lock: the running attempt's writes, a takeover, another operator's action
        // wait for this transaction, and then see what it did.
        let current = by_key(sql::GET_FOR_UPDATE, key)
            .fetch_optional(&mut *tx)
            .await?;
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

    crate::operator::operator_reads!();
    crate::operations::operations_sql!();
}

/// The connection a migration run holds the lock on: closed rather than pooled again unless
/// the run released the lock and reset the session (a run dropped halfway, say).
struct MigrationSession {
    conn: PoolConnection<Postgres>,
    clean: bool,
}

impl Drop for MigrationSession {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

/// Applies the pending migrations, each in its own transaction with its history row. The
/// caller holds the migration lock: nobody else applies anything meanwhile.
async fn apply_migrations(conn: &mut PgConnection) -> Result<(), StoreError> {
    conn.execute(sql::HISTORY).await?;
    let recorded: Vec<(i64, Vec<u8>)> = sqlx::query_as(sql::APPLIED).fetch_all(&mut *conn).await?;
    for migration in crate::migrate::pending(&MIGRATIONS, &recorded)? {
        let version = migration.version;
        let mut tx = Transaction::<Postgres>::begin(&mut *conn, None).await?;
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

/// Deletes idem 0.1's row from sqlx's history, if there is one: the table it recorded is
/// the one migration 1 just adopted.
async fn forget_sqlx_history(tx: &mut Transaction<'_, Postgres>) -> Result<(), sqlx::Error> {
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

/// A `LIKE` pattern for keys starting with `prefix`, with `!` escaping the wildcards.
fn like_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '!') {
            pattern.push('!');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
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
    let mut sql =
        String::with_capacity(512 + 4 * text_len + 2 * (row.fingerprint.len() + row.body.len()));
    sql.push_str(
        "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
         response_status, response_headers, response_body, created_at, completed_at, \
         expires_at) VALUES (",
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
        (row.expires_ms, ")"),
    ] {
        let _ = write!(sql, "to_timestamp({ms}::float8 / 1000){end}");
    }
    sql.push_str("; COMMIT; BEGIN");
    sql
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A `bytea` literal: `E'\\x<hex>'::bytea`. The escape-string syntax reads the same whatever
/// `standard_conforming_strings` says; the server parses the hexadecimal in `bytea`'s input.
fn push_bytes(sql: &mut String, bytes: &[u8]) {
    sql.push_str(r"E'\\x");
    sql.reserve(2 * bytes.len() + 8);
    for &b in bytes {
        sql.push(char::from(HEX[usize::from(b >> 4)]));
        sql.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    sql.push_str("'::bytea");
}

/// A `text` literal with every byte as an escape, `E'\x74\x65…'`: the lexer makes it the
/// string; there is no function call for the server to resolve.
fn push_text(sql: &mut String, text: &str) {
    sql.push_str("E'");
    sql.reserve(4 * text.len() + 1);
    for &b in text.as_bytes() {
        sql.push_str(r"\x");
        sql.push(char::from(HEX[usize::from(b >> 4)]));
        sql.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    sql.push('\'');
}

/// The key table's primary key refused the row (and not, say, a deferred unique constraint
/// of the application's refusing the `COMMIT`).
fn is_unique_violation(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|e| {
        e.code().is_some_and(|code| code == "23505")
            && e.constraint() == Some("idempotency_keys_pkey")
    })
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
        // Processes of different versions share a database during a rolling deploy: they
        // must lock the same key with the same id. Changing this value is a breaking change.
        assert_eq!(
            id("tenant:t1", "create_order:v1", "k-1"),
            LOCK_ID_TENANT_T1_K1
        );
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

    #[test]
    fn the_merged_statement_holds_request_values_only_as_hex() {
        let body: &[u8] = b"{\"a\":\"'; DROP TABLE x; --\"}";
        let row = NewRow {
            key: KeyRef {
                scope: "tenant:o'brien",
                operation: "op:v1",
                key: "k'); COMMIT; --",
            },
            fingerprint: &[0x00, 0xff, 0x10],
            status: 201,
            headers_json: r#"[["location","/x?a='b'"]]"#,
            body,
            created_ms: 1_000,
            completed_ms: 2_000,
            expires_ms: 3_000,
            replace_expired: false,
        };
        let sql = insert_and_commit_statement(&row);
        assert!(sql.ends_with("; COMMIT; BEGIN"), "{sql}");
        // Every quote in the statement opens or closes a literal of hexadecimal escapes or
        // a fixed word: `\xHH…` (text), `\\x<hex>` (bytea), `completed`.
        let quoted: Vec<&str> = sql.split('\'').skip(1).step_by(2).collect();
        assert_eq!(quoted.len(), 7, "{sql}");
        for literal in &quoted {
            let text = literal.len() % 4 == 0
                && literal.as_bytes().chunks(4).all(|c| {
                    c[0] == b'\\' && c[1] == b'x' && c[2..].iter().all(u8::is_ascii_hexdigit)
                });
            let bytea = literal
                .strip_prefix("\\\\x")
                .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(text || bytea || *literal == "completed", "{literal}");
        }
        assert!(sql.contains(r"E'\\x00ff10'::bytea"), "{sql}");
        assert!(sql.contains("to_timestamp(3000::float8 / 1000))"), "{sql}");
        assert!(sql.contains(", 'completed', 201, "), "{sql}");
        // The key, byte for byte.
        let key_escaped: String = "k'); COMMIT; --"
            .bytes()
            .map(|b| format!("\\x{b:02x}"))
            .collect();
        assert!(sql.contains(&format!("E'{key_escaped}'")), "{sql}");
    }

    #[test]
    fn prefixes_match_wildcards_literally() {
        assert_eq!(like_prefix("a%b_c!d"), "a!%b!_c!!d%");
        assert_eq!(like_prefix(""), "%");
    }

    // Computed independently: SHA-256 over the length-prefixed parts, first 8 bytes LE.
    const LOCK_ID_TENANT_T1_K1: i64 = 3_618_639_434_383_866_314;
}
