//! [`Backend`]: the protocol's primitives, on every database idem keeps keys in.

use std::future::Future;

use sqlx::{Database, Pool, Transaction};

use crate::dialect::{Arg, Dialect, Wire, connect};
use crate::key::KeyRef;
use crate::migration::Migration;
use crate::protocol::{Begun, Failure, KeyLock, NewRow, TxSettings};
use crate::row::{StoredKey, StoredResponse, StoredStatus};
use crate::sql::{ROLLBACK_TO_SAVEPOINT, SAVEPOINT};
use crate::staged::StagedSql;

/// A database idem keeps keys in, one of [the stores](crate#stores) (`sqlx::Postgres`,
/// `sqlx::MySql`, `sqlx::Sqlite`); the bound of [`crate::KeyTable`], [`crate::Outbox`] and
/// [`crate::migrate`].
///
/// Its methods are the primitives of the execution protocol, which `idem-runtime` composes
/// (look the key up; begin a transaction holding the key's lock; the application's work;
/// insert the completed row and commit). They are the runtime's, not an API of this crate:
/// hidden from these docs, changed between versions at will, and the runtime depends on
/// exactly the version of this crate it was built with (`=`). They return [`sqlx::Error`]:
/// the runtime keeps the raw error, and what it means depends on the step (a failed
/// `COMMIT` leaves the outcome unknown).
///
/// Sealed: every database is written once over the crate's private dialect trait, and its
/// guarantees are proven by the store's conformance suite.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database idem can keep keys in",
    note = "idem stores keys in `sqlx::Postgres`, `sqlx::MySql` or `sqlx::Sqlite`, each with the feature of its name (`postgres`, `mysql`, `sqlite`)"
)]
pub trait Backend: Dialect + StagedSql {
    #[doc(hidden)]
    /// Whether an execution may take the key's lock before looking the key up, saving the
    /// lookup's round trip when the key is new: where [`Backend::begin`] with a lock is one
    /// round trip that fails with [`Failure::Taken`] when the key's row exists (PostgreSQL).
    /// Elsewhere a key that exists would cost more round trips than the lookup saves
    /// (MySQL), or there is no round trip to save (SQLite, in process).
    const LOCK_FIRST: bool;

    #[doc(hidden)]
    /// The migrations that create and evolve the key table, in order
    /// ([`crate::migrate`] applies them).
    fn migrations() -> &'static [Migration];

    #[doc(hidden)]
    /// Opens a pool on `url` with settings suited to the protocol.
    ///
    /// - PostgreSQL: `application_name` `idem` unless the URL sets one; no session-wide
    ///   timeouts (each of idem's transactions sets its own with `SET LOCAL`, so that the
    ///   application's queries on the same pool are not bound by idem's settings);
    ///   `client_connection_check_interval` of one second, so that a statement whose client
    ///   gave up waiting is cancelled instead of holding a server process. Once
    ///   [`crate::pooler::behind_transaction_pooler`] was called, no startup parameters at
    ///   all (neither `options` nor sqlx's `extra_float_digits`), which PgBouncer refuses.
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

    #[doc(hidden)]
    /// Whether two connections of `pool`, open at once, met the same server session: then a
    /// transaction pooler (PgBouncer in transaction mode) is in between. Each asks which
    /// session it is on, one after the other, as one statement outside a transaction, which
    /// such a pooler serves on whichever server session is free — usually the one the first
    /// just gave back. `false` proves nothing (a busy pooler hands out another session);
    /// `true` proves the pooler: without one, two open connections are two sessions.
    /// Always `false` where the database has no such statement (SQLite), or when the pool
    /// holds fewer than two connections.
    fn shared_sessions(pool: &Pool<Self>)
    -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    #[doc(hidden)]
    /// Reads the columns of `key`'s row a request needs: one `SELECT` by primary key.
    fn lookup(
        conn: &mut <Self as Database>::Connection,
        key: KeyRef<'_>,
    ) -> impl Future<Output = Result<Option<StoredKey>, sqlx::Error>> + Send;

    #[doc(hidden)]
    /// What tells this key table's locks from those of other key tables the database may hold
    /// (PostgreSQL: `current_schema()`; SQLite: nothing, the empty string). Ask once per
    /// process and pass it in every [`KeyLock`].
    fn namespace(
        conn: &mut <Self as Database>::Connection,
    ) -> impl Future<Output = Result<String, sqlx::Error>> + Send;

    #[doc(hidden)]
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

    #[doc(hidden)]
    /// The statement that begins a transaction without a key's lock with the timeouts of
    /// `settings` (PostgreSQL: `BEGIN` and `SET LOCAL`, one round trip; SQLite: `BEGIN`, the
    /// connection's `busy_timeout` bounding its waits), for
    /// [`sqlx::Pool::begin_with`].
    fn begin_statement(settings: &TxSettings) -> String;

    #[doc(hidden)]
    /// Puts `conn` back in a usable state after [`Backend::begin`] failed: on PostgreSQL a
    /// statement after `BEGIN` failing (a lock wait running out) leaves an aborted
    /// transaction that sqlx does not know about. Never fails: a connection this cannot
    /// repair is broken, and its next use says so.
    fn abandon_begin(conn: &mut <Self as Database>::Connection) -> impl Future<Output = ()> + Send;

    #[doc(hidden)]
    /// `SAVEPOINT idem_handler`: separates the application's writes from the key row, for a
    /// failure that is stored while its writes are undone.
    fn savepoint(
        tx: &mut Transaction<'_, Self>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    #[doc(hidden)]
    /// `ROLLBACK TO SAVEPOINT idem_handler`: undoes the application's writes since
    /// [`Backend::savepoint`], keeping the transaction (and the key's lock).
    fn rollback_to_savepoint(
        tx: &mut Transaction<'_, Self>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    #[doc(hidden)]
    /// Inserts the completed key row with its response, in `tx`. Returns `false`, changing
    /// nothing, when the row exists already (and, with [`NewRow::replace_expired`], had not
    /// expired by [`NewRow::created_ms`]): another execution of the key committed first.
    fn insert_completed(
        tx: &mut Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    #[doc(hidden)]
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

    #[doc(hidden)]
    /// What a database error means for the protocol: a lock wait that ran out
    /// (PostgreSQL `55P03` `lock_not_available` and `57014` `query_canceled`; MySQL 1205,
    /// 1213, 1969 and 3024; SQLite `SQLITE_BUSY` and `SQLITE_LOCKED`), a connection that is
    /// gone, or anything else.
    fn classify(error: &sqlx::Error) -> Failure;

    #[doc(hidden)]
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

/// Every database with a dialect is a [`Backend`]: the primitives are written once, on
/// the dialect's statements and functions.
impl<DB: Dialect + StagedSql> Backend for DB {
    const LOCK_FIRST: bool = DB::ONE_TRIP_LOCK;

    fn migrations() -> &'static [Migration] {
        DB::MIGRATIONS
    }

    async fn connect(
        url: &str,
        max_connections: u32,
        settings: &TxSettings,
    ) -> Result<Pool<Self>, sqlx::Error> {
        connect(url, max_connections, settings).await
    }

    async fn shared_sessions(pool: &Pool<Self>) -> Result<bool, sqlx::Error> {
        let Some(sql) = DB::SESSION_ID else {
            return Ok(false);
        };
        if pool.options().get_max_connections() < 2 {
            return Ok(false);
        }
        let (mut first, mut second) = (pool.acquire().await?, pool.acquire().await?);
        let mut ids = Vec::with_capacity(2);
        for conn in [&mut *first, &mut *second] {
            // As a simple query: a prepared one could meet another client's statement names.
            let row = DB::fetch_optional_on(Wire::Literal, conn, sql, &[]).await?;
            ids.push(row.map(|row| DB::int(&row, 0)).transpose()?);
        }
        Ok(ids[0].is_some() && ids[0] == ids[1])
    }

    async fn lookup(
        conn: &mut DB::Connection,
        key: KeyRef<'_>,
    ) -> Result<Option<StoredKey>, sqlx::Error> {
        let row = DB::fetch_optional(conn, DB::SQL.lookup, &Arg::key(key)).await?;
        let Some(row) = row else { return Ok(None) };
        let status = StoredStatus::from_column(&DB::text(&row, 1)?);
        let response = match DB::opt_int32(&row, 2)? {
            Some(code) if status == StoredStatus::Completed => Some(StoredResponse::lenient(
                code,
                DB::opt_text(&row, 3)?.as_deref(),
                DB::opt_bytes(&row, 4)?,
            )),
            _ => None,
        };
        Ok(Some(StoredKey {
            fingerprint: DB::bytes(&row, 0)?,
            status,
            response,
            expires_at_ms: DB::int(&row, 5)?,
            locked_until_ms: DB::opt_int(&row, 6)?,
            attempt: DB::int(&row, 7)?,
        }))
    }

    async fn namespace(conn: &mut DB::Connection) -> Result<String, sqlx::Error> {
        DB::lock_namespace(conn).await
    }

    async fn begin<'c>(
        conn: &'c mut DB::Connection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        DB::begin_locked(conn, settings, lock).await
    }

    fn begin_statement(settings: &TxSettings) -> String {
        DB::begin_sql(settings)
    }

    async fn abandon_begin(conn: &mut DB::Connection) {
        DB::after_failed_begin(conn).await;
    }

    async fn savepoint(tx: &mut Transaction<'_, Self>) -> Result<(), sqlx::Error> {
        DB::execute(tx, SAVEPOINT, &[]).await.map(drop)
    }

    async fn rollback_to_savepoint(tx: &mut Transaction<'_, Self>) -> Result<(), sqlx::Error> {
        DB::execute(tx, ROLLBACK_TO_SAVEPOINT, &[]).await.map(drop)
    }

    async fn insert_completed(
        tx: &mut Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        let sql = DB::SQL;
        let statement = match (sql.clear_expired, row.replace_expired) {
            (_, false) => sql.insert_completed,
            (None, true) => sql.insert_completed_or_replace_expired,
            // The expired row deleted first, where the insert cannot replace it.
            (Some(clear), true) => {
                let args = Arg::on_key(row.key, &[Arg::Int(row.created_ms)]);
                DB::execute(tx, clear, &args).await?;
                sql.insert_completed
            }
        };
        let args = [
            Arg::Text(row.key.scope),
            Arg::Text(row.key.operation),
            Arg::Text(row.key.key),
            Arg::Bytes(row.fingerprint),
            Arg::Int32(i32::from(row.status)),
            Arg::Text(row.headers_json),
            Arg::Bytes(row.body),
            Arg::Int(row.created_ms),
            Arg::Int(row.completed_ms),
            Arg::Int(row.expires_ms),
        ];
        match DB::execute(tx, statement, &args).await {
            Ok(inserted) => Ok(inserted == 1),
            // Without `ON CONFLICT … DO NOTHING`: the row exists.
            Err(error) if DB::is_duplicate(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn insert_completed_and_commit(
        mut tx: Transaction<'_, Self>,
        mut row: NewRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        let Some(batch) = DB::insert_and_commit(&row) else {
            row.replace_expired = false; // Documented as ignored: see `insert_completed`.
            if !Self::insert_completed(&mut tx, row).await? {
                return Ok(false);
            }
            tx.commit().await?;
            return Ok(true);
        };
        match DB::batch(&mut tx, &batch).await {
            // The batch ends with a new transaction (`…; COMMIT; BEGIN`): dropping `tx` rolls
            // back that empty one, the `ROLLBACK` going out with the connection's next
            // message, so that sqlx's view of the connection and the server's agree again.
            Ok(()) => Ok(true),
            // The key's row exists: the `INSERT` failed, the transaction is aborted, the
            // `COMMIT` skipped, and dropping `tx` rolls back.
            Err(error) if DB::is_key_taken(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::protocol::is_connection_error(error) {
            return Failure::Disconnected;
        }
        DB::failure_of(error)
    }

    async fn key_lock_taken(
        conn: &mut DB::Connection,
        lock: KeyLock<'_>,
    ) -> Result<bool, sqlx::Error> {
        DB::probe_key_lock(conn, lock).await
    }
}
