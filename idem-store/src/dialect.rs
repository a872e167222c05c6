//! What differs between the databases idem keeps keys in ([`Dialect`]), and the typed calls
//! into sqlx the rest of the crate makes on any of them ([`Glue`]).
//!
//! A backend is its SQL (every statement written out in its own words, [`crate::sql::Sql`],
//! and its migrations) plus the few functions that really differ: opening a pool,
//! beginning a transaction that holds a key, the merged insert-and-commit where a database
//! offers one, classifying errors, probing a key's lock, locking migrations, measuring the
//! table. Everything else is written once, generic over this trait.

use std::future::Future;

use sqlx::pool::PoolOptions;
use sqlx::{
    ColumnIndex, Connection, Database, Decode, Encode, Executor, IntoArguments, Pool, Row as _,
    Transaction, Type,
};

use sha2::{Digest as _, Sha256};

use crate::key::KeyRef;
use crate::migration::Migration;
use crate::pooler::inline;
use crate::protocol::{Begun, Failure, KeyLock, NewRow, TxSettings};
pub(crate) use crate::sql::Arg;
use crate::sql::Sql;

/// How a statement with parameters goes to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Prepared once per connection and cached (sqlx's default).
    Prepared,
    /// One simple query, the parameters written as literals (where the database takes them:
    /// [`Quirks::LITERALS`]).
    Literal,
}

impl Wire {
    /// What this process uses: [`Wire::Literal`] after [`crate::pooler::behind_transaction_pooler`].
    pub(crate) fn now() -> Self {
        if crate::pooler::is_behind_transaction_pooler() {
            Self::Literal
        } else {
            Self::Prepared
        }
    }
}

/// The calls into sqlx the crate makes generically: run a statement with [`Arg`]s, read a
/// column. Implemented once, for every database sqlx can bind and read idem's types on; the
/// bounds that takes are written here and nowhere else.
pub trait Glue: Database {
    /// Every row `sql` returns, sent the way this process sends statements
    /// ([`crate::pooler`]).
    fn fetch_all<'a>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'a {
        Self::fetch_all_on(Wire::now(), conn, sql, args)
    }

    /// The row `sql` returns, if any.
    fn fetch_optional<'a>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send + 'a {
        Self::fetch_optional_on(Wire::now(), conn, sql, args)
    }

    /// Runs `sql`; how many rows it changed.
    fn execute<'a>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a {
        Self::execute_on(Wire::now(), conn, sql, args)
    }

    /// [`Glue::fetch_all`], sent as `wire` says.
    fn fetch_all_on<'a>(
        wire: Wire,
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'a;

    /// [`Glue::fetch_optional`], sent as `wire` says.
    fn fetch_optional_on<'a>(
        wire: Wire,
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send + 'a;

    /// [`Glue::execute`], sent as `wire` says.
    fn execute_on<'a>(
        wire: Wire,
        conn: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;

    /// Runs `sql`, several statements and no parameters, as one batch (PostgreSQL's simple
    /// query protocol: one round trip).
    fn batch<'a>(
        conn: &'a mut Self::Connection,
        sql: &'a str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a;

    /// Column `i` of `row`.
    fn text(row: &Self::Row, i: usize) -> Result<String, sqlx::Error>;
    /// Column `i` of `row`, which may be `NULL`.
    fn opt_text(row: &Self::Row, i: usize) -> Result<Option<String>, sqlx::Error>;
    /// Column `i` of `row`.
    fn int(row: &Self::Row, i: usize) -> Result<i64, sqlx::Error>;
    /// Column `i` of `row`, which may be `NULL`.
    fn opt_int(row: &Self::Row, i: usize) -> Result<Option<i64>, sqlx::Error>;
    /// Column `i` of `row`, which may be `NULL`.
    fn opt_int32(row: &Self::Row, i: usize) -> Result<Option<i32>, sqlx::Error>;
    /// Column `i` of `row`.
    fn bytes(row: &Self::Row, i: usize) -> Result<Vec<u8>, sqlx::Error>;
    /// Column `i` of `row`, which may be `NULL`.
    fn opt_bytes(row: &Self::Row, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error>;
    /// Column `i` of `row`.
    fn flag(row: &Self::Row, i: usize) -> Result<bool, sqlx::Error>;
}

/// How many rows a statement changed: each database's `QueryResult` tells, none through a
/// trait of sqlx's.
pub trait RowsAffected {
    /// How many rows the statement changed.
    fn rows_affected(&self) -> u64;
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "mysql")]
impl RowsAffected for sqlx::mysql::MySqlQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// What sqlx's drivers do differently below the SQL.
pub trait Quirks {
    /// Whether text is read without sqlx's type check: MySQL reports a column of a binary
    /// collation (`utf8mb4_bin`, which idem's keys use to compare byte for byte) as bytes.
    const TEXT_UNCHECKED: bool = false;
    /// Whether statements can go as [`Wire::Literal`] ([`crate::pooler::inline`]'s syntax is
    /// PostgreSQL's): elsewhere they are always prepared.
    const LITERALS: bool = false;
}

#[cfg(feature = "postgres")]
impl Quirks for sqlx::Postgres {
    const LITERALS: bool = true;
}

#[cfg(feature = "sqlite")]
impl Quirks for sqlx::Sqlite {}

#[cfg(feature = "mysql")]
impl Quirks for sqlx::MySql {
    const TEXT_UNCHECKED: bool = true;
}

/// `sql` with `args` bound in order.
fn query<'a, DB>(
    sql: &'a str,
    args: &'a [Arg<'a>],
) -> sqlx::query::Query<'a, DB, <DB as Database>::Arguments<'a>>
where
    DB: Database,
    &'a str: Encode<'a, DB> + Type<DB>,
    Option<&'a str>: Encode<'a, DB> + Type<DB>,
    Option<i64>: Encode<'a, DB> + Type<DB>,
    &'a [u8]: Encode<'a, DB> + Type<DB>,
    i64: Encode<'a, DB> + Type<DB>,
    i32: Encode<'a, DB> + Type<DB>,
    bool: Encode<'a, DB> + Type<DB>,
{
    args.iter().fold(sqlx::query(sql), |query, arg| match *arg {
        Arg::Text(v) => query.bind(v),
        Arg::OptText(v) => query.bind(v),
        Arg::Int(v) => query.bind(v),
        Arg::OptInt(v) => query.bind(v),
        Arg::Int32(v) => query.bind(v),
        Arg::Bytes(v) => query.bind(v),
        Arg::Bool(v) => query.bind(v),
    })
}

impl<DB> Glue for DB
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i32: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> Vec<u8>: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
    DB: Quirks,
{
    async fn fetch_all_on<'a>(
        wire: Wire,
        conn: &'a mut DB::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> Result<Vec<DB::Row>, sqlx::Error> {
        if DB::LITERALS && wire == Wire::Literal {
            return conn.fetch_all(inline(sql, args).as_str()).await;
        }
        query(sql, args).fetch_all(conn).await
    }

    async fn fetch_optional_on<'a>(
        wire: Wire,
        conn: &'a mut DB::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> Result<Option<DB::Row>, sqlx::Error> {
        if DB::LITERALS && wire == Wire::Literal {
            return conn.fetch_optional(inline(sql, args).as_str()).await;
        }
        query(sql, args).fetch_optional(conn).await
    }

    async fn execute_on<'a>(
        wire: Wire,
        conn: &'a mut DB::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> Result<u64, sqlx::Error> {
        let done = if DB::LITERALS && wire == Wire::Literal {
            conn.execute(inline(sql, args).as_str()).await?
        } else {
            query(sql, args).execute(conn).await?
        };
        Ok(done.rows_affected())
    }

    async fn batch<'a>(conn: &'a mut DB::Connection, sql: &'a str) -> Result<(), sqlx::Error> {
        conn.execute(sql).await.map(drop)
    }

    fn text(row: &DB::Row, i: usize) -> Result<String, sqlx::Error> {
        if DB::TEXT_UNCHECKED {
            return row.try_get_unchecked(i);
        }
        row.try_get(i)
    }
    fn opt_text(row: &DB::Row, i: usize) -> Result<Option<String>, sqlx::Error> {
        if DB::TEXT_UNCHECKED {
            return row.try_get_unchecked(i);
        }
        row.try_get(i)
    }
    fn int(row: &DB::Row, i: usize) -> Result<i64, sqlx::Error> {
        row.try_get(i)
    }
    fn opt_int(row: &DB::Row, i: usize) -> Result<Option<i64>, sqlx::Error> {
        row.try_get(i)
    }
    fn opt_int32(row: &DB::Row, i: usize) -> Result<Option<i32>, sqlx::Error> {
        row.try_get(i)
    }
    fn bytes(row: &DB::Row, i: usize) -> Result<Vec<u8>, sqlx::Error> {
        row.try_get(i)
    }
    fn opt_bytes(row: &DB::Row, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error> {
        row.try_get(i)
    }
    fn flag(row: &DB::Row, i: usize) -> Result<bool, sqlx::Error> {
        row.try_get(i)
    }
}

/// A database idem keeps keys in: its statements, its migrations, and
/// the few functions that really differ between databases. Private to the crate, which seals
/// [`crate::Backend`]: every backend passes the store's conformance suite.
pub trait Dialect: Glue {
    /// The migrations that create and evolve the key table, in order.
    const MIGRATIONS: &'static [Migration];

    /// Every statement, as this database is sent it.
    const SQL: Sql;

    /// Whether parameters are `?`, taken in order, rather than numbered (`$1`, `$2`, …):
    /// MySQL's.
    const POSITIONAL: bool = false;

    /// `idem_schema_migrations`, created if missing.
    const HISTORY: &'static str;

    /// Whether idem 0.1's migration history (sqlx's `_sqlx_migrations`) is where unqualified
    /// names go.
    const HAS_SQLX_HISTORY: &'static str;

    /// How a transaction that writes begins where plain `BEGIN` would take its write locks
    /// too late (SQLite: `BEGIN IMMEDIATE`); `None` (the default): `BEGIN`, rows read with
    /// `{for_update}`.
    const BEGIN_WRITE: Option<&'static str> = None;

    /// The statement that names the server session a connection is on (PostgreSQL:
    /// `SELECT pg_backend_pid()::int8`), where two connections could share one through a
    /// transaction pooler: see [`crate::Backend::shared_sessions`]. Default: none.
    const SESSION_ID: Option<&'static str> = None;

    /// How a migration's transaction begins: [`Dialect::BEGIN_WRITE`], or with the lock that
    /// makes one process at a time migrate where it is transaction-scoped (PostgreSQL).
    const BEGIN_MIGRATION: Option<&'static str> = Self::BEGIN_WRITE;

    /// Whether `BEGIN`, the key's lock and the look at its row again are one round trip to
    /// a server (PostgreSQL's `idem_lock_key`): what [`crate::Backend::LOCK_FIRST`] says.
    const ONE_TRIP_LOCK: bool = false;

    /// Whether `INSERT`, `UPDATE` and `DELETE` take `RETURNING`. Where they do not (MySQL),
    /// the generic code reads the rows again.
    const RETURNING: bool = true;

    /// Where writes return nothing: the statement that reads the id the last `INSERT`
    /// generated (the audit entry's).
    const LAST_INSERT_ID: &'static str = "";

    /// Whether `error` is a unique key refusing a row: where inserts have no
    /// `ON CONFLICT … DO NOTHING` (MySQL), the generic code takes it for "exists already".
    fn is_duplicate(error: &sqlx::Error) -> bool {
        let _ = error;
        false
    }

    /// A listing's condition on keys starting with `prefix`, with a `$n` for `pattern`: the
    /// condition's text before and after the parameter, and the pattern bound to it. Default:
    /// `LIKE` with `!` escaping the wildcards (case-sensitive on PostgreSQL, and on MySQL
    /// through the key's binary collation).
    fn key_prefix(prefix: &str) -> (&'static str, &'static str, String) {
        (
            " AND idempotency_key LIKE ",
            " ESCAPE '!'",
            like_prefix(prefix),
        )
    }

    /// The connection options of `url` with the protocol's settings (see
    /// [`crate::Backend::connect`]).
    fn connect_options(
        url: &str,
        settings: &TxSettings,
    ) -> Result<<Self::Connection as Connection>::Options, sqlx::Error>;

    /// The pool's options beyond its size and acquire timeout.
    fn pool_options(options: PoolOptions<Self>) -> PoolOptions<Self> {
        options
    }

    /// See [`crate::Backend::namespace`].
    fn lock_namespace(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<String, sqlx::Error>> + Send;

    /// See [`crate::Backend::begin`].
    fn begin_locked<'c>(
        conn: &'c mut Self::Connection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> impl Future<Output = Result<Begun<'c, Self>, sqlx::Error>> + Send;

    /// See [`crate::Backend::begin_statement`].
    fn begin_sql(settings: &TxSettings) -> String;

    /// See [`crate::Backend::abandon_begin`].
    fn after_failed_begin(conn: &mut Self::Connection) -> impl Future<Output = ()> + Send {
        let _ = conn;
        async {}
    }

    /// The completed row's `INSERT` and `COMMIT` as one batch, where that saves round trips
    /// (PostgreSQL: `INSERT …; COMMIT; BEGIN`, one simple query); `None`: a bound `INSERT`,
    /// then `COMMIT`.
    fn insert_and_commit(row: &NewRow<'_>) -> Option<String> {
        let _ = row;
        None
    }

    /// Whether `error` is the key table's primary key refusing the batch of
    /// [`Dialect::insert_and_commit`]: another execution's row.
    fn is_key_taken(error: &sqlx::Error) -> bool {
        let _ = error;
        false
    }

    /// See [`crate::Backend::classify`].
    fn failure_of(error: &sqlx::Error) -> Failure;

    /// See [`crate::Backend::key_lock_taken`]. Default: cannot tell, `false`.
    fn probe_key_lock(
        conn: &mut Self::Connection,
        lock: KeyLock<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        let _ = (conn, lock);
        async { Ok(false) }
    }

    /// Takes the lock that makes one process at a time migrate, on `conn`, for the session
    /// (MySQL: `GET_LOCK`). Default: none, each migration's [`Dialect::BEGIN_MIGRATION`]
    /// transaction taking its lock.
    fn lock_migrations(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let _ = conn;
        async { Ok(()) }
    }

    /// Lets go of [`Dialect::lock_migrations`]'s lock and resets the session.
    fn unlock_migrations(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let _ = conn;
        async { Ok(()) }
    }

    /// The key table's size on disk with its indexes, where the database can tell.
    fn table_bytes(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send;

    /// The advisory lock id of `key`'s attempt `attempt`, where staged mode's holds exist
    /// ([`Sql::hold`]). Default: no holds, never asked.
    fn hold_id(namespace: &str, key: KeyRef<'_>, attempt: i64) -> i64 {
        let _ = (namespace, key, attempt);
        0
    }
}

/// A pattern matching keys that start with `prefix`: each character through `push` (which
/// escapes the pattern language's wildcards its own way), then `any`, the wildcard for the
/// rest.
pub(crate) fn prefix_pattern(prefix: &str, any: char, push: impl Fn(char, &mut String)) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        push(c, &mut pattern);
    }
    pattern.push(any);
    pattern
}

/// A `LIKE` pattern for keys starting with `prefix`, with `!` escaping the wildcards.
pub(crate) fn like_prefix(prefix: &str) -> String {
    prefix_pattern(prefix, '%', |c, pattern| {
        if matches!(c, '%' | '_' | '!') {
            pattern.push('!');
        }
        pattern.push(c);
    })
}

/// The lock id that stands for a key while an execution of it runs (PostgreSQL's advisory
/// lock, MySQL's lock row): the first eight
/// bytes of SHA-256 over the length-prefixed schema of the key table (advisory locks are per
/// database, keys per table), scope, operation and key. Distinct keys sharing a lock id (odds
/// 2^-64 per pair) only wait for each other; the primary key still keeps them apart.
pub(crate) fn lock_id(namespace: &str, key: KeyRef<'_>) -> i64 {
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

/// Opens a pool on `url` (see [`crate::Backend::connect`]).
pub(crate) async fn connect<DB: Dialect>(
    url: &str,
    max_connections: u32,
    settings: &TxSettings,
) -> Result<Pool<DB>, sqlx::Error> {
    let options = DB::connect_options(url, settings)?;
    let pool = PoolOptions::<DB>::new()
        .max_connections(max_connections)
        .acquire_timeout(settings.acquire_timeout)
        // A dead connection fails its query (answered 503, retry with the same key) instead
        // of costing every request a ping round trip.
        .test_before_acquire(false);
    DB::pool_options(pool).connect_with(options).await
}

/// The end of a `begin` that holds the key's lock in a transaction (SQLite's write lock,
/// MySQL's lock row): the key looked at again, under the lock. A row committed while the
/// lock was awaited (or not expired by [`KeyLock::expired_by_ms`]) rolls the transaction
/// back: [`Begun::Taken`].
pub(crate) async fn look_again<'c, DB: Dialect>(
    mut tx: Transaction<'c, DB>,
    lock: KeyLock<'_>,
) -> Result<Begun<'c, DB>, sqlx::Error> {
    let row = DB::fetch_optional(&mut tx, DB::SQL.expires_at, &Arg::key(lock.key)).await?;
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

/// `Transaction::begin` with [`Dialect::BEGIN_WRITE`].
pub(crate) async fn begin_write<DB: Dialect>(
    conn: &mut DB::Connection,
) -> Result<Transaction<'_, DB>, sqlx::Error> {
    Transaction::begin(conn, DB::BEGIN_WRITE.map(Into::into)).await
}

impl<'a> Arg<'a> {
    /// The key's three parts, then `rest`: the parameters of a statement on one key.
    pub(crate) fn on_key(key: KeyRef<'a>, rest: &[Self]) -> Vec<Self> {
        Self::around_key(&[], key, rest)
    }

    /// `before`, the key's three parts, then `after`: the parameters of a statement that sets
    /// columns before its `WHERE` names the key.
    pub(crate) fn around_key(before: &[Self], key: KeyRef<'a>, after: &[Self]) -> Vec<Self> {
        let mut args = Vec::with_capacity(before.len() + 3 + after.len());
        args.extend_from_slice(before);
        args.extend(Self::key(key));
        args.extend_from_slice(after);
        args
    }
}

/// A statement put together at run time (a listing and its filters), its parameters
/// numbered as they are bound.
#[derive(Debug)]
pub(crate) struct Statement<'a> {
    pub(crate) sql: String,
    pub(crate) args: Vec<Arg<'a>>,
    /// [`Dialect::POSITIONAL`] of the database it is for.
    positional: bool,
}

impl<'a> Statement<'a> {
    pub(crate) fn new<DB: Dialect>(start: &str) -> Self {
        Self {
            sql: start.to_owned(),
            args: Vec::new(),
            positional: DB::POSITIONAL,
        }
    }

    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Binds `arg` to the next parameter, and returns its name (`$n`, or `?` where
    /// parameters are positional) to write where it goes.
    pub(crate) fn param(&mut self, arg: Arg<'a>) -> String {
        self.args.push(arg);
        if self.positional {
            "?".to_owned()
        } else {
            format!("${}", self.args.len())
        }
    }

    /// Binds `arg` where the statement ends now.
    pub(crate) fn bind(&mut self, arg: Arg<'a>) -> &mut Self {
        let name = self.param(arg);
        self.push(&name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement of every store, recorded: a change to one shows as a change of SQL.
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_statements() {
        insta::assert_snapshot!("postgres", <sqlx::Postgres as Dialect>::SQL.listing());
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_statements() {
        insta::assert_snapshot!("sqlite", <sqlx::Sqlite as Dialect>::SQL.listing());
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_statements() {
        insta::assert_snapshot!("mysql", <sqlx::MySql as Dialect>::SQL.listing());
    }

    #[test]
    fn like_prefixes_match_wildcards_literally() {
        assert_eq!(like_prefix("a%b_c!d"), "a!%b!_c!!d%");
        assert_eq!(like_prefix(""), "%");
    }
}
