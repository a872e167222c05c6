//! [`Backend`]: the protocol's primitives, on every database idem keeps keys in.

use std::future::Future;

use sqlx::{Database, Pool, Transaction};

use sqlx::Connection;
use sqlx::pool::PoolOptions;

use crate::glue::{Glue, like_prefix};
use crate::key::KeyRef;
use crate::migration::Migration;
use crate::protocol::{Begun, Failure, KeyLock, NewRow, TxSettings};
use crate::sql::Sql;
use crate::staged::Fence;

/// A database idem keeps keys in, one of [the stores](crate#stores); the bound of
/// [`crate::KeyTable`], [`crate::Outbox`] and [`crate::migrate()`]. Sealed
/// ([the conformance kit](crate#the-conformance-kit)).
///
/// Its methods are the primitives of the execution protocol, which `idem-runtime` composes
/// (look the key up; begin a transaction holding the key's lock; the application's work;
/// insert the completed row and commit): the runtime's, hidden from these docs and changed
/// between versions at will ([the stores](crate#stores)). They return [`sqlx::Error`]: the
/// runtime keeps the raw error, and what it means depends on the step (a failed `COMMIT`
/// leaves the outcome unknown). Each store implements what differs (its statements, its
/// lock, its errors); the protocol's primitives are written once, as provided methods.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database idem can keep keys in",
    note = "idem stores keys in `sqlx::Postgres`, `sqlx::MySql` or `sqlx::Sqlite`, each with the feature of its name (`postgres`, `mysql`, `sqlite`)"
)]
pub trait Backend: Glue + sealed::Sealed {
    #[doc(hidden)]
    /// The migrations that create and evolve the key table, in order
    /// ([`crate::migrate`] applies them).
    fn migrations() -> &'static [Migration];

    #[doc(hidden)]
    /// Every statement, as this database is sent it.
    const SQL: Sql;

    #[doc(hidden)]
    /// How this store's statements differ in shape ([`Dialect`]).
    const DIALECT: Dialect = Dialect::NUMBERED;

    #[doc(hidden)]
    /// The connection options of `url` with the protocol's settings (see
    /// [`Self::connect`]).
    fn connect_options(
        url: &str,
        settings: &TxSettings,
    ) -> Result<<Self::Connection as Connection>::Options, sqlx::Error>;

    #[doc(hidden)]
    /// The pool's options beyond its size and acquire timeout.
    fn pool_options(options: PoolOptions<Self>) -> PoolOptions<Self> {
        options
    }

    #[doc(hidden)]
    /// Begins a transaction on `conn`; with `lock`, holding [the key's lock](crate#the-keys-lock)
    /// from its first round trip on (a duplicate waits there, at most
    /// [`TxSettings::lock_timeout`]): [`Begun::Taken`] (on PostgreSQL [`Failure::Taken`]) when
    /// the key's row is there once it holds it ([`KeyLock::expired_by_ms`]).
    fn begin<'c>(
        conn: &'c mut <Self as Database>::Connection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> impl Future<Output = Result<Begun<'c, Self>, sqlx::Error>> + Send;

    #[doc(hidden)]
    /// The statement that begins a transaction without a key's lock, with the timeouts of
    /// `settings` where the store sets them per transaction, for [`sqlx::Pool::begin_with`].
    fn begin_statement(settings: &TxSettings) -> String;

    #[doc(hidden)]
    /// Puts `conn` back in a usable state after [`Self::begin`] failed (on PostgreSQL, an
    /// aborted transaction sqlx does not know about). Never fails: a connection this cannot
    /// repair is broken, and its next use says so.
    fn abandon_begin(conn: &mut <Self as Database>::Connection) -> impl Future<Output = ()> + Send {
        let _ = conn;
        async {}
    }

    #[doc(hidden)]
    /// The completed row's `INSERT` and `COMMIT` as one batch, where that saves round trips
    /// ([PostgreSQL](crate#postgresql-the-record-and-its-commit-in-one-round-trip)); `None`: a
    /// bound `INSERT`, then `COMMIT`.
    fn insert_and_commit(row: &NewRow<'_>) -> Option<String> {
        let _ = row;
        None
    }

    #[doc(hidden)]
    /// Whether `error` is the key table's row refused as a duplicate: its primary key
    /// refusing the batch of [`Self::insert_and_commit`] (another execution's row), or, where
    /// inserts have no `ON CONFLICT … DO NOTHING` (MySQL), a unique key refusing a row, which
    /// the generic code takes for "exists already".
    fn is_duplicate(error: &sqlx::Error) -> bool {
        let _ = error;
        false
    }

    #[doc(hidden)]
    /// What a database error means for the protocol ([`Failure`]).
    fn classify(error: &sqlx::Error) -> Failure;

    #[doc(hidden)]
    /// After [`Self::begin`] failed with [`Failure::LockTimeout`] (and
    /// [`Self::abandon_begin`]): whether the wait was for a duplicate holding the key's lock
    /// ([`KeySql::key_lock_taken`]) rather than for a lock of something else; `false` if unknown.
    fn key_lock_taken(
        conn: &mut <Self as Database>::Connection,
        lock: KeyLock<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        let _ = (conn, lock);
        async { Ok(false) }
    }

    #[doc(hidden)]
    /// A listing's condition on keys starting with `prefix`, with a `$n` for `pattern`: the
    /// condition's text before and after the parameter, and the pattern bound to it. `LIKE`
    /// is case-sensitive on PostgreSQL, and on MySQL through the key's binary collation.
    fn key_prefix(prefix: &str) -> (&'static str, &'static str, String) {
        (
            " AND idempotency_key LIKE ",
            " ESCAPE '!'",
            like_prefix(prefix),
        )
    }

    #[doc(hidden)]
    /// The advisory lock id of `key`'s attempt `fence`, where staged mode's holds exist
    /// ([`StagedSql::hold`]). Default: no holds, never asked.
    fn hold_id(namespace: &str, key: KeyRef<'_>, fence: Fence) -> i64 {
        let _ = (namespace, key, fence);
        0
    }

    #[doc(hidden)]
    /// Opens a pool with `options` on `url`'s [`Self::connect_options`]; on PostgreSQL, on a
    /// [host list](crate::hosts) when `url` is one.
    fn open(
        url: &str,
        options: PoolOptions<Self>,
        settings: &TxSettings,
    ) -> impl Future<Output = Result<Pool<Self>, sqlx::Error>> + Send {
        async move {
            options
                .connect_with(Self::connect_options(url, settings)?)
                .await
        }
    }
}

/// How a store's statements differ in shape, beside their text ([`Backend::DIALECT`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// Whether parameters are `?`, taken in order, rather than `$1`, `$2`, …: MySQL's.
    pub positional: bool,
    /// Whether an execution may take the key's lock before looking the key up, saving the
    /// lookup's round trip when the key is new (PostgreSQL and MySQL:
    /// [the key's lock](crate#the-keys-lock)).
    pub lock_first: bool,
    /// With `lock_first`, how many round trips more than the lookup alone a key that exists
    /// costs when the lock came first (the lock's round trips, its `ROLLBACK`, then the
    /// lookup), against the one a new key saves: how much an existing key weighs in the
    /// runtime's choice. PostgreSQL's `BEGIN` and lock are one round trip: 2.
    pub lock_first_miss: i8,
    /// Whether `INSERT`, `UPDATE` and `DELETE` take `RETURNING`. Where they do not (MySQL),
    /// the generic code reads the rows again.
    pub returning: bool,
}

impl Dialect {
    /// `$n` parameters, `RETURNING`, the lookup first: SQLite's, and PostgreSQL's but for
    /// its lock first.
    pub const NUMBERED: Self = Self {
        positional: false,
        lock_first: false,
        lock_first_miss: 2,
        returning: true,
    };
}

/// Seals [`Backend`]: the stores are this crate's.
mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
}

/// The end of a `begin` that holds the key's lock in a transaction (SQLite's write lock,
/// MySQL's lock row): the look again of [`KeyLock::expired_by_ms`] and [`Begun::Taken`].
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) async fn look_again<'c, DB: Backend>(
    mut tx: Transaction<'c, DB>,
    lock: KeyLock<'_>,
) -> Result<Begun<'c, DB>, sqlx::Error> {
    let key = crate::glue::Arg::key(lock.key);
    let row = DB::fetch_optional(&mut tx, DB::SQL.keys.expires_at, &key).await?;
    let expires = row.map(|row| DB::int(&row, 0)).transpose()?;
    match (expires, lock.expired_by_ms) {
        (None, _) => Ok(Begun::Free(tx)),
        (Some(expires), Some(by)) if expires <= by => Ok(Begun::Free(tx)),
        (Some(_), _) => {
            tx.rollback().await?;
            Ok(Begun::Taken)
        }
    }
}

/// `Transaction::begin` with [`KeySql::begin_write`].
pub(crate) async fn begin_write<DB: Backend>(
    conn: &mut DB::Connection,
) -> Result<Transaction<'_, DB>, sqlx::Error> {
    Transaction::begin(conn, DB::SQL.keys.begin_write.map(Into::into)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql/<store>.snap` (see [`crate::sql`]).
    fn record<DB: Backend>(store: &str) {
        insta::with_settings!({ snapshot_path => "../sql", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(store, DB::SQL.listing());
        });
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_statements() {
        record::<sqlx::Postgres>("postgres");
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_statements() {
        record::<sqlx::Sqlite>("sqlite");
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_statements() {
        record::<sqlx::MySql>("mysql");
    }
}
