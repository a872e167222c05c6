//! The key table and the queries on it, one implementation per backend.
//!
//! Both backends run the same statements (see the `sql` modules beside this file); they
//! differ only in how they write timestamps and how a lock wait times out. Every query lives
//! here so the operator tool and future modes reuse them.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use sqlx::migrate::Migrator;
use sqlx::{Database, Pool, Transaction};

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

/// The identity of one key row: (scope, operation, idempotency_key).
#[derive(Debug, Clone, Copy)]
pub struct KeyRef<'a> {
    /// `global`, `tenant:<id>` or `user:<id>`.
    pub scope: &'a str,
    /// The operation id, e.g. `create_order:v1`.
    pub operation: &'a str,
    /// The client's key.
    pub key: &'a str,
}

/// A response (or any result of the plain function API): status, headers and body.
///
/// Only the headers in the configured allow-list are stored; a replay answers with those.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// HTTP status. `>= 400` counts as failure: rolled back and not stored, except `4xx`
    /// for operations with `store_client_errors`.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

impl Record {
    /// A `status` record with a JSON body, for the plain function API.
    ///
    /// # Errors
    /// When `value` cannot be serialised.
    pub fn json(status: u16, value: &impl serde::Serialize) -> Result<Self, serde_json::Error> {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(Self {
            status,
            headers,
            body: serde_json::to_vec(value)?.into(),
        })
    }

    /// Whether the record is a failure (`status >= 400`).
    #[must_use]
    pub fn is_failure(&self) -> bool {
        self.status >= 400
    }

    pub(crate) fn headers_json(&self, allow: &[HeaderName]) -> String {
        let pairs: Vec<(&str, &str)> = allow
            .iter()
            .flat_map(|name| {
                self.headers
                    .get_all(name)
                    .iter()
                    .filter_map(move |v| Some((name.as_str(), v.to_str().ok()?)))
            })
            .collect();
        serde_json::to_string(&pairs).unwrap_or_else(|_| "[]".to_owned())
    }

    pub(crate) fn from_stored(status: i32, headers: Option<&str>, body: Vec<u8>) -> Self {
        let mut map = HeaderMap::new();
        let pairs: Vec<(String, String)> = headers
            .and_then(|h| serde_json::from_str(h).ok())
            .unwrap_or_default();
        for (name, value) in pairs {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                map.append(name, value);
            }
        }
        Self {
            status: u16::try_from(status).unwrap_or(500),
            headers: map,
            body: body.into(),
        }
    }
}

/// What the key table holds for one key.
#[derive(Debug, Clone)]
pub struct StoredKey {
    /// SHA-256 of the first request.
    pub fingerprint: Vec<u8>,
    /// `processing` or `completed`.
    pub status: String,
    /// The stored response, once completed.
    pub record: Option<Record>,
    /// Expiry, in milliseconds since the Unix epoch.
    pub expires_at_ms: i64,
}

/// The key an execution locks, and the key table's namespace ([`Backend::namespace`]).
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct KeyLock<'a> {
    pub namespace: &'a str,
    pub key: KeyRef<'a>,
}

/// A completed key row, as [`Backend::store`] inserts it.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct NewRow<'a> {
    pub key: KeyRef<'a>,
    pub fingerprint: &'a [u8],
    pub record: &'a Record,
    /// The stored headers, as JSON pairs.
    pub headers_json: &'a str,
    /// When the execution began (`created_at`); an expired row is replaced only if it had
    /// expired by then.
    pub created_ms: i64,
    /// When the record was stored (`completed_at`).
    pub completed_ms: i64,
    pub expires_ms: i64,
    /// Overwrite a row that expired by `created_ms` (`ExpiryPolicy::Reexecute`).
    pub replace_expired: bool,
}

/// How a database error bears on the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Failure {
    /// A lock wait ran out: another transaction holds the key.
    LockTimeout,
    /// Anything else.
    Other,
}

/// Per-transaction settings the store applies when it begins one.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct TxSettings {
    pub lock_timeout: Duration,
    pub statement_timeout: Duration,
    /// Whether the pool's sessions already have the timeouts (pools idem opened itself);
    /// otherwise each transaction sets them with `SET LOCAL`.
    pub session_has_timeouts: bool,
}

mod sealed {
    pub trait Sealed {}
}

/// A database idem can keep keys in: `sqlx::Postgres` (feature `postgres`) or
/// `sqlx::Sqlite` (feature `sqlite`).
///
/// Sealed: the protocol's guarantees are proven per backend by this crate's tests.
pub trait Backend: Database + sealed::Sealed {
    /// The migrations that create and evolve the key table.
    fn migrator() -> Migrator;

    #[doc(hidden)]
    fn migrate(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<(), sqlx::migrate::MigrateError>> + Send;

    #[doc(hidden)]
    fn connect(
        url: &str,
        max_connections: u32,
        settings: &TxSettings,
    ) -> impl Future<Output = Result<Pool<Self>, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn lookup(
        conn: &mut <Self as Database>::Connection,
        key: KeyRef<'_>,
    ) -> impl Future<Output = Result<Option<StoredKey>, sqlx::Error>> + Send;

    /// Begins a transaction on `conn`. With `lock`, the transaction holds the key's lock from
    /// its first round trip on: PostgreSQL takes a transaction-scoped advisory lock on a hash
    /// of the key in the same round trip as `BEGIN`; SQLite takes the database's write lock
    /// (`BEGIN IMMEDIATE`). A concurrent execution of the same key waits there.
    #[doc(hidden)]
    fn begin<'c>(
        conn: &'c mut <Self as Database>::Connection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> impl Future<Output = Result<Transaction<'c, Self>, sqlx::Error>> + Send;

    /// What tells this key table's locks from those of other key tables the database may
    /// hold (PostgreSQL: the current schema). Asked once per [`crate::Idem`].
    #[doc(hidden)]
    fn namespace(
        conn: &mut <Self as Database>::Connection,
    ) -> impl Future<Output = Result<String, sqlx::Error>> + Send;

    /// Puts `conn` back in a usable state after [`Backend::begin`] failed: on PostgreSQL a
    /// statement after `BEGIN` failing (a lock wait running out) leaves an aborted
    /// transaction that sqlx does not know about.
    #[doc(hidden)]
    fn abandon_begin(conn: &mut <Self as Database>::Connection) -> impl Future<Output = ()> + Send;

    #[doc(hidden)]
    fn execute_raw(
        tx: &mut Transaction<'_, Self>,
        sql: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Inserts the completed key row with its record. Returns `false`, changing nothing,
    /// when the row exists already (and, with `replace_expired`, has not expired): another
    /// execution of the key committed first.
    #[doc(hidden)]
    fn store(
        tx: &mut Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Inserts the completed key row and commits, in as few round trips as the backend
    /// allows (PostgreSQL: one). Returns `false` when the key's row exists already; the
    /// transaction is rolled back then. An error leaves the outcome unknown: the commit may
    /// or may not have happened. Never used to replace an expired row.
    #[doc(hidden)]
    fn store_and_commit(
        tx: Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn sweep(
        pool: &Pool<Self>,
        before_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn classify(error: &sqlx::Error) -> Failure;
}

/// The body of every `Backend` implementation: the statements differ, the code does not.
macro_rules! impl_backend_queries {
    () => {
        async fn migrate(pool: &Pool<Self>) -> Result<(), sqlx::migrate::MigrateError> {
            Self::migrator().run(pool).await
        }

        async fn lookup(
            conn: &mut <Self as sqlx::Database>::Connection,
            key: KeyRef<'_>,
        ) -> Result<Option<StoredKey>, sqlx::Error> {
            use sqlx::Row as _;
            let row = sqlx::query(sql::LOOKUP)
                .bind(key.scope)
                .bind(key.operation)
                .bind(key.key)
                .fetch_optional(conn)
                .await?;
            let Some(row) = row else { return Ok(None) };
            let status: String = row.try_get(1)?;
            let response_status: Option<i32> = row.try_get(2)?;
            let record = match response_status {
                Some(code) if status == "completed" => {
                    let headers: Option<String> = row.try_get(3)?;
                    let body: Option<Vec<u8>> = row.try_get(4)?;
                    Some(Record::from_stored(
                        code,
                        headers.as_deref(),
                        body.unwrap_or_default(),
                    ))
                }
                _ => None,
            };
            Ok(Some(StoredKey {
                fingerprint: row.try_get(0)?,
                status,
                record,
                expires_at_ms: row.try_get(5)?,
            }))
        }

        async fn execute_raw(
            tx: &mut Transaction<'_, Self>,
            statement: &'static str,
        ) -> Result<(), sqlx::Error> {
            sqlx::query(statement).execute(&mut **tx).await?;
            Ok(())
        }

        async fn store(
            tx: &mut Transaction<'_, Self>,
            row: NewRow<'_>,
        ) -> Result<bool, sqlx::Error> {
            let statement = if row.replace_expired {
                sql::STORE_OR_REPLACE_EXPIRED
            } else {
                sql::STORE
            };
            let done = sqlx::query(statement)
                .bind(row.key.scope)
                .bind(row.key.operation)
                .bind(row.key.key)
                .bind(row.fingerprint)
                .bind(i32::from(row.record.status))
                .bind(row.headers_json)
                .bind(row.record.body.as_ref())
                .bind(row.created_ms)
                .bind(row.completed_ms)
                .bind(row.expires_ms)
                .execute(&mut **tx)
                .await?;
            Ok(done.rows_affected() == 1)
        }

        async fn sweep(pool: &Pool<Self>, before_ms: i64, batch: i64) -> Result<u64, sqlx::Error> {
            let done = sqlx::query(sql::SWEEP)
                .bind(before_ms)
                .bind(batch)
                .execute(pool)
                .await?;
            Ok(done.rows_affected())
        }
    };
}
use impl_backend_queries;

/// Savepoint that separates the handler's writes from the key row.
pub(crate) const SAVEPOINT: &str = "SAVEPOINT idem_handler";
/// Undoes the handler's writes, keeping the key row.
pub(crate) const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT idem_handler";
