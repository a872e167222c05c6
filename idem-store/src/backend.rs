//! [`Backend`]: the protocol's primitives, one implementation per database.

use std::future::Future;
use std::time::Duration;

use sqlx::{Database, Pool, Transaction};

use crate::key::KeyRef;
use crate::migration::Migration;
use crate::outbox::message::OutboxSql;
use crate::row::StoredKey;
use crate::sealed::Sealed;
use crate::staged::StagedSql;

/// The key an execution locks while it runs ([`Backend::begin`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyLock<'a> {
    /// What tells this key table's locks from those of other key tables in the same
    /// database: [`Backend::namespace`], asked once per process.
    pub namespace: &'a str,
    /// The key.
    pub key: KeyRef<'a>,
    /// Once the lock is held the key must still have no row, or (`Some(t)`, an execution
    /// replacing an expired row) no row unexpired at `t`, milliseconds since the Unix epoch;
    /// otherwise [`Backend::begin`] answers [`Begun::Taken`].
    pub expired_by_ms: Option<i64>,
}

/// What [`Backend::begin`] found.
#[derive(Debug)]
pub enum Begun<'c, DB: Database> {
    /// The transaction, holding the key's lock, the key still free.
    Free(Transaction<'c, DB>),
    /// The key's row appeared while the lock was awaited (another execution committed): the
    /// transaction was rolled back, nothing ran, and the connection is usable. Look the key
    /// up again: its row is the answer.
    Taken,
}

impl<'c, DB: Database> Begun<'c, DB> {
    /// The transaction, if the key was free.
    #[must_use]
    pub fn free(self) -> Option<Transaction<'c, DB>> {
        match self {
            Self::Free(tx) => Some(tx),
            Self::Taken => None,
        }
    }
}

/// A completed key row, as [`Backend::insert_completed`] and
/// [`Backend::insert_completed_and_commit`] write it.
///
/// The response is borrowed in the form the columns take (status, headers as JSON, body), so
/// that storing it copies nothing; [`crate::StoredResponse`] is the owned form reads return.
#[derive(Debug, Clone, Copy)]
pub struct NewRow<'a> {
    /// The key.
    pub key: KeyRef<'a>,
    /// The request's fingerprint (SHA-256, 32 bytes).
    pub fingerprint: &'a [u8],
    /// `response_status`.
    pub status: u16,
    /// `response_headers`: the stored headers as [`crate::StoredResponse::encode_headers`]
    /// writes them.
    pub headers_json: &'a str,
    /// `response_body`.
    pub body: &'a [u8],
    /// When the execution began (`created_at`), in milliseconds since the Unix epoch; an
    /// expired row is replaced only if it had expired by then.
    pub created_ms: i64,
    /// When the response was stored (`completed_at`).
    pub completed_ms: i64,
    /// When the key expires (`expires_at`).
    pub expires_ms: i64,
    /// Overwrite a row that had expired by `created_ms` (an operation that runs expired keys
    /// again). Only [`Backend::insert_completed`] does.
    pub replace_expired: bool,
}

/// How a database error bears on the protocol ([`Backend::classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// A lock wait or a statement ran out of time (PostgreSQL `lock_timeout` or
    /// `statement_timeout`, SQLite `busy_timeout`): another transaction holds what the
    /// statement needed: the key's lock or anything else ([`Backend::key_lock_taken`] tells
    /// which). The statement failed: nothing it was part of committed.
    LockTimeout,
    /// [`Backend::begin`] found the key's row once it held the lock (PostgreSQL reports it
    /// as an error of `BEGIN`'s round trip, SQLSTATE `IK001`; SQLite as [`Begun::Taken`]):
    /// after [`Backend::abandon_begin`], look the key up again.
    Taken,
    /// The connection is gone or unusable (an I/O or protocol error, PostgreSQL's class `08`
    /// and `57P01`–`57P03`, the server shutting down): whatever was under way has an unknown
    /// outcome, and a pooled connection found so was stale.
    Disconnected,
    /// Anything else: the database refused the statement (it failed, nothing it was part of
    /// committed), or the error is not the database's.
    Other,
}

/// Settings [`Backend::connect`] and [`Backend::begin`] apply.
#[derive(Debug, Clone)]
pub struct TxSettings {
    /// How long a transaction waits for a lock (the key's, or any other): PostgreSQL
    /// `lock_timeout`, SQLite `busy_timeout`.
    pub lock_timeout: Duration,
    /// PostgreSQL `statement_timeout` inside idempotent transactions.
    pub statement_timeout: Duration,
    /// How long a caller of a pool [`Backend::connect`] opens waits for a connection
    /// (sqlx's `acquire_timeout`): a database that is down fails fast for the application's
    /// queries on the pool too.
    pub acquire_timeout: Duration,
}

/// A database idem keeps keys in: [`sqlx::Postgres`] (feature `postgres`) or [`sqlx::Sqlite`]
/// (feature `sqlite`).
///
/// The methods are the primitives of the execution protocol, which `idem-runtime` composes:
///
/// 1. [`Backend::lookup`] the key (one `SELECT`, outside any transaction);
/// 2. [`Backend::begin`] a transaction holding the key's lock; on error
///    [`Backend::abandon_begin`], and [`Backend::classify`] the error (a lock wait that ran
///    out is a duplicate in flight);
/// 3. optionally [`Backend::savepoint`], the application's work, and
///    [`Backend::rollback_to_savepoint`] for a failure that is stored anyway;
/// 4. [`Backend::insert_completed_and_commit`] (or [`Backend::insert_completed`] then
///    `COMMIT`); `false` means another execution of the key committed first.
///
/// They return [`sqlx::Error`], not [`crate::StoreError`]: the runtime keeps the raw error,
/// and what it means depends on the step (a failed `COMMIT` leaves the outcome unknown).
///
/// Sealed: the protocol's guarantees are proven per backend by idem's tests.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database idem can keep keys in",
    note = "idem stores keys in `sqlx::Postgres` (feature `postgres`) or `sqlx::Sqlite` (feature `sqlite`)"
)]
pub trait Backend: Database + Sealed + StagedSql + OutboxSql {
    /// The migrations that create and evolve the key table, in order
    /// ([`crate::migrate`] applies them).
    fn migrations() -> &'static [Migration];

    /// Opens a pool on `url` with settings suited to the protocol.
    ///
    /// - PostgreSQL: `application_name` `idem` unless the URL sets one; no session-wide
    ///   timeouts (each of idem's transactions sets its own with `SET LOCAL`, so that the
    ///   application's queries on the same pool are not bound by idem's settings);
    ///   `client_connection_check_interval` of one second, so that a statement whose client
    ///   gave up waiting is cancelled instead of holding a server process.
    /// - SQLite: the file is created if missing; WAL, `synchronous = FULL`, `busy_timeout` =
    ///   `settings.lock_timeout`.
    /// - Both: statements are never logged by sqlx, slow or not (idem's statements carry
    ///   keys, tenants and response bodies).
    ///
    /// Connections are not pinged before use unless they sat idle for a second or more (on
    /// PostgreSQL, where a restart leaves the pool's connections dead): a busy pool's requests
    /// pay no round trip, and the runtime retries a read-only lookup that finds its
    /// connection stale.
    fn connect(
        url: &str,
        max_connections: u32,
        settings: &TxSettings,
    ) -> impl Future<Output = Result<Pool<Self>, sqlx::Error>> + Send;

    /// Reads the columns of `key`'s row a request needs: one `SELECT` by primary key.
    fn lookup(
        conn: &mut <Self as Database>::Connection,
        key: KeyRef<'_>,
    ) -> impl Future<Output = Result<Option<StoredKey>, sqlx::Error>> + Send;

    /// What tells this key table's locks from those of other key tables the database may hold
    /// (PostgreSQL: `current_schema()`; SQLite: nothing, the empty string). Ask once per
    /// process and pass it in every [`KeyLock`].
    fn namespace(
        conn: &mut <Self as Database>::Connection,
    ) -> impl Future<Output = Result<String, sqlx::Error>> + Send;

    /// Begins a transaction on `conn`. With `lock`, the transaction holds the key's lock from
    /// its first round trip on: PostgreSQL takes a transaction-scoped advisory lock on a hash
    /// of the namespace and key in the same round trip as `BEGIN` (with the `SET LOCAL`
    /// timeouts of `settings`); SQLite takes the database's write
    /// lock (`BEGIN IMMEDIATE`). A concurrent execution of the same key waits there, at most
    /// [`TxSettings::lock_timeout`].
    ///
    /// Once it holds the lock, it looks at the key again ([`KeyLock::expired_by_ms`]): an
    /// execution that committed while this one waited makes it [`Begun::Taken`], so that a
    /// duplicate never runs the work. PostgreSQL takes the lock and looks in one call of the
    /// function `idem_lock_key` (migrations 2 and 7), which raises `IK001`: an error [`Backend::classify`] calls
    /// [`Failure::Taken`]); SQLite with one `SELECT` in the transaction, answering
    /// [`Begun::Taken`].
    fn begin<'c>(
        conn: &'c mut <Self as Database>::Connection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> impl Future<Output = Result<Begun<'c, Self>, sqlx::Error>> + Send;

    /// The statement that begins a transaction without a key's lock with the timeouts of
    /// `settings` (PostgreSQL: `BEGIN` and `SET LOCAL`, one round trip; SQLite: `BEGIN`, the
    /// connection's `busy_timeout` bounding its waits), for
    /// [`sqlx::Pool::begin_with`].
    fn begin_statement(settings: &TxSettings) -> String;

    /// Puts `conn` back in a usable state after [`Backend::begin`] failed: on PostgreSQL a
    /// statement after `BEGIN` failing (a lock wait running out) leaves an aborted
    /// transaction that sqlx does not know about. Never fails: a connection this cannot
    /// repair is broken, and its next use says so.
    fn abandon_begin(conn: &mut <Self as Database>::Connection) -> impl Future<Output = ()> + Send;

    /// `SAVEPOINT idem_handler`: separates the application's writes from the key row, for a
    /// failure that is stored while its writes are undone.
    fn savepoint(
        tx: &mut Transaction<'_, Self>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// `ROLLBACK TO SAVEPOINT idem_handler`: undoes the application's writes since
    /// [`Backend::savepoint`], keeping the transaction (and the key's lock).
    fn rollback_to_savepoint(
        tx: &mut Transaction<'_, Self>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Inserts the completed key row with its response, in `tx`. Returns `false`, changing
    /// nothing, when the row exists already (and, with [`NewRow::replace_expired`], had not
    /// expired by [`NewRow::created_ms`]): another execution of the key committed first.
    fn insert_completed(
        tx: &mut Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Inserts the completed key row and commits, in as few round trips as the backend
    /// allows (PostgreSQL: one simple query `INSERT …; COMMIT; BEGIN`). Returns `false` when
    /// the key's row exists already; the transaction is rolled back then. An error leaves the
    /// outcome unknown only if [`Backend::classify`] does not call it [`Failure::Other`] or
    /// [`Failure::LockTimeout`] of a database error: the database refused a statement, and
    /// nothing committed. Ignores
    /// [`NewRow::replace_expired`]: an expired row is replaced with
    /// [`Backend::insert_completed`] and a separate `COMMIT`.
    fn insert_completed_and_commit(
        tx: Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// What a database error means for the protocol: a lock wait that ran out
    /// (PostgreSQL `55P03` `lock_not_available` and `57014` `query_canceled`; SQLite
    /// `SQLITE_BUSY` and `SQLITE_LOCKED`), a connection that is gone, or anything else.
    fn classify(error: &sqlx::Error) -> Failure;

    /// After [`Backend::begin`] failed with [`Failure::LockTimeout`] (and
    /// [`Backend::abandon_begin`]): whether another transaction holds the key's lock now, that
    /// is, whether the wait was for a duplicate of the request (PostgreSQL: the key's advisory
    /// lock cannot be taken) rather than for a lock of something else (a table locked from
    /// outside). SQLite cannot tell, the key's lock being the database's one write lock:
    /// `false`.
    fn key_lock_taken(
        conn: &mut <Self as Database>::Connection,
        lock: KeyLock<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
}

/// Whether `error` says the connection itself failed (I/O, protocol, TLS, a closed pool or
/// a crashed worker), before any database-specific code is looked at.
pub(crate) fn is_connection_error(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    )
}
