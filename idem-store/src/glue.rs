//! The typed calls into sqlx the crate makes on every database ([`Glue`]: run a statement
//! with [`Arg`]s, read a column), what sqlx's drivers do differently below the SQL
//! ([`Quirks`]), and the key's lock ids.

use std::future::Future;

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row as _, Type};

use crate::key::KeyRef;
use crate::pooler::inline;
pub(crate) use crate::sql::Arg;

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

/// The calls into sqlx the crate makes generically. Implemented once, for every database sqlx
/// can bind and read idem's types on: the bounds that takes are written here and nowhere else.
pub trait Glue: Database {
    /// Every row `sql` returns, sent as this process sends them ([`crate::pooler`]).
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
    Option<&'a [u8]>: Encode<'a, DB> + Type<DB>,
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
        Arg::OptBytes(v) => query.bind(v),
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
    for<'q> Option<&'q [u8]>: Encode<'q, DB> + Type<DB>,
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
/// lock, MySQL's lock row): the [`advisory_id`] of the key table's `namespace` and the key
/// ([the key's lock](crate#the-keys-lock)).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn lock_id(namespace: &str, key: KeyRef<'_>) -> i64 {
    advisory_id(&[namespace, key.scope, key.operation, key.key])
}

/// An advisory lock id: the first eight bytes of SHA-256 over the length-prefixed `parts`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn advisory_id(parts: &[&str]) -> i64 {
    use sha2::{Digest as _, Sha256};

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
