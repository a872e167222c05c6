//! The test harness: a new, empty database for each test, on PostgreSQL, SQLite or MySQL,
//! and one generic test body run on each backend.
//!
//! - PostgreSQL comes from `DATABASE_URL` (default [`DEFAULT_POSTGRES_URL`]): each test gets
//!   a new schema `idem_test_<uuid>`, named by the URL's `options=-c search_path=…` and as
//!   its `application_name` (so that a test can find its own sessions). An unreachable server
//!   fails the test: nothing is skipped.
//! - With `PGBOUNCER_URL` set (a transaction pooler in front of that server, such as
//!   `.ci/pgbouncer` starts), each PostgreSQL test gets a new database `idem_test_<uuid>`
//!   instead — PgBouncer refuses a startup `options` (or drops it) — created on the server directly; its URL goes
//!   through the pooler ([`pooled`] says so, and [`direct`] maps it back for the tests' own
//!   looks at `pg_locks` and the like), and the process sends idem's statements as a pooler
//!   needs them ([`behind_transaction_pooler`](idem_store::pooler::behind_transaction_pooler)).
//! - SQLite: a new file `idem_test_<uuid>.db` in [`temp_dir`], `idem-tests` under the
//!   system's temporary directory.
//! - MySQL (or MariaDB) comes from `MYSQL_URL` (default [`DEFAULT_MYSQL_URL`]): each test
//!   gets a new database `idem_test_<uuid>`; an unreachable server fails the test.
//!
//! Nothing is dropped when a test ends: a failed test leaves its data to look at. Schemas
//! and databases starting `idem_test_` and the directory `idem-tests` are what CI clears
//! before a run.
//!
//! [`TestBackend`] is implemented for every [`Backend`] the test's crate enables, so the
//! harness needs no feature of its own: generic test bodies take `DB: TestBackend`, and
//! [`on_every_store!`](crate::on_every_store) turns them into one `#[tokio::test]` per store
//! whose feature the test's crate turns on.
//!
//! ```ignore
//! use idem_store::KeyTable;
//! use idem_testkit::harness::{TestBackend, settings};
//!
//! async fn a_new_table_is_empty<DB: TestBackend>() {
//!     let url = DB::fresh_url().await;
//!     let table = KeyTable::new(idem_store::connect::connect::<DB>(&url, 4, &settings()).await.unwrap());
//!     table.migrate().await.unwrap();
//!     // …
//! }
//!
//! // `postgres::a_new_table_is_empty`, `sqlite::a_new_table_is_empty` and
//! // `mysql::a_new_table_is_empty`.
//! idem_testkit::on_every_store!(a_new_table_is_empty);
//! ```

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use idem_store::sqlx::{Database, Executor};
use idem_store::{Backend, TxSettings};

/// The PostgreSQL server tests use when `DATABASE_URL` names none.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A fixed "now", in milliseconds since the Unix epoch (2027-01-15): the store never reads
/// the clock, so its tests need none.
pub const NOW: i64 = 1_800_000_000_000;
/// An hour, in milliseconds.
pub const HOUR: i64 = 3_600_000;

/// The PostgreSQL server of the tests: `DATABASE_URL` when it names a PostgreSQL database,
/// [`DEFAULT_POSTGRES_URL`] otherwise.
#[must_use]
pub fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))
        .unwrap_or_else(|| DEFAULT_POSTGRES_URL.to_owned())
}

/// The transaction pooler PostgreSQL tests go through: `PGBOUNCER_URL`, when set (its
/// database part is ignored).
#[must_use]
pub fn pooled() -> Option<String> {
    std::env::var("PGBOUNCER_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))
}

/// `url` as a direct connection to the server reaches the same database: a URL through the
/// pooler of [`pooled`] with its host and port replaced by [`postgres_url`]'s; any other URL
/// as it is.
#[must_use]
pub fn direct(url: &str) -> String {
    match pooled() {
        Some(pooler) if url.starts_with(base(&pooler)) => {
            format!("{}{}", base(&postgres_url()), &url[base(&pooler).len()..])
        }
        _ => url.to_owned(),
    }
}

/// `scheme://user@host:port`: a URL up to its path.
fn base(url: &str) -> &str {
    let start = url.find("://").map_or(0, |at| at + 3);
    url[start..].find('/').map_or(url, |at| &url[..start + at])
}

/// The MySQL or MariaDB server tests use when `MYSQL_URL` names none.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306";

/// The MySQL server of the tests (no database in the URL): `MYSQL_URL`, or
/// [`DEFAULT_MYSQL_URL`].
#[must_use]
pub fn mysql_url() -> String {
    std::env::var("MYSQL_URL")
        .ok()
        .filter(|u| u.starts_with("mysql") || u.starts_with("mariadb"))
        .unwrap_or_else(|| DEFAULT_MYSQL_URL.to_owned())
}

/// `<prefix>_<uuid>`: a name no other test uses.
#[must_use]
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// `idem-tests` under the system's temporary directory, created if need be: where the
/// tests' SQLite files and other files go.
///
/// # Panics
/// When the directory cannot be created.
#[must_use]
pub fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("idem-tests");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// `<name>.db` in [`temp_dir`].
#[must_use]
pub fn temp_file(name: &str) -> PathBuf {
    temp_dir().join(format!("{name}.db"))
}

/// A new, empty directory `<name>_<uuid>` in [`temp_dir`].
///
/// # Panics
/// When the directory cannot be created.
#[must_use]
pub fn new_dir(name: &str) -> PathBuf {
    let dir = temp_dir().join(unique(name));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// The settings of the tests' pools: a short lock timeout, generous statement and acquire
/// timeouts for a loaded machine.
#[must_use]
pub fn settings() -> TxSettings {
    TxSettings {
        lock_timeout: Duration::from_secs(2),
        statement_timeout: Duration::from_secs(30),
        acquire_timeout: Duration::from_secs(30),
    }
}

/// A new, empty database for one test ([`TestBackend::fresh`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDatabase {
    /// Its URL: on PostgreSQL the server's ([`postgres_url`]) with the schema as
    /// `search_path` and `application_name` (or a database of its own, through the pooler of
    /// [`pooled`]); on SQLite `sqlite://` and the file; on MySQL the server's
    /// ([`mysql_url`]) with the database.
    pub url: String,
    /// Where it lives.
    pub location: Location,
}

/// Where a [`TestDatabase`] lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// PostgreSQL: this schema on the server of [`postgres_url`].
    Schema(String),
    /// PostgreSQL through the pooler of [`pooled`]: this database on the server of
    /// [`postgres_url`].
    PooledDatabase(String),
    /// SQLite: this file.
    File(PathBuf),
    /// MySQL: this database on the server of [`mysql_url`].
    Database(String),
}

/// A backend the tests run on: a new, empty database for each test.
///
/// Implemented for every [`Backend`], that is every store idem supports, told apart by
/// [`Database::NAME`].
pub trait TestBackend: Backend {
    /// A new, empty database, as [the module's docs](crate::harness) say for each store.
    /// Nothing is created in it: tests connect and migrate.
    fn fresh() -> impl Future<Output = TestDatabase> + Send;

    /// The URL of a new, empty database ([`TestBackend::fresh`]).
    fn fresh_url() -> impl Future<Output = String> + Send {
        async { Self::fresh().await.url }
    }
}

impl<DB> TestBackend for DB
where
    DB: Backend,
    for<'c> &'c mut <DB as Database>::Connection: Executor<'c, Database = DB>,
{
    async fn fresh() -> TestDatabase {
        let name = unique("idem_test");
        match DB::NAME {
            "PostgreSQL" => {
                let server = postgres_url();
                match pooled() {
                    // A database of its own, reached through the pooler.
                    Some(pooler) => {
                        idem_store::pooler::behind_transaction_pooler();
                        create::<DB>("PostgreSQL", &server, &format!("CREATE DATABASE {name}"))
                            .await;
                        TestDatabase {
                            url: format!("{}/{name}?application_name={name}", base(&pooler)),
                            location: Location::PooledDatabase(name),
                        }
                    }
                    // A schema of its own, as the URL's `search_path`.
                    None => {
                        create::<DB>("PostgreSQL", &server, &format!("CREATE SCHEMA {name}")).await;
                        let separator = if server.contains('?') { '&' } else { '?' };
                        TestDatabase {
                            url: format!(
                                "{server}{separator}options=-c%20search_path%3D{name}&application_name={name}"
                            ),
                            location: Location::Schema(name),
                        }
                    }
                }
            }
            "SQLite" => {
                let file = temp_file(&name);
                TestDatabase {
                    url: format!("sqlite://{}", file.display()),
                    location: Location::File(file),
                }
            }
            "MySQL" => {
                let server = mysql_url();
                let server = server.trim_end_matches('/');
                create::<DB>("MySQL", server, &format!("CREATE DATABASE {name}")).await;
                TestDatabase {
                    url: format!("{server}/{name}"),
                    location: Location::Database(name),
                }
            }
            other => panic!("the test harness knows no database {other}"),
        }
    }
}

/// Runs `statement` (a `CREATE` of the test's schema or database) on the `store` server at
/// `url`, through a connection of its own; an unreachable server fails the test.
async fn create<DB>(store: &str, url: &str, statement: &str)
where
    DB: Backend,
    for<'c> &'c mut <DB as Database>::Connection: Executor<'c, Database = DB>,
{
    let admin = idem_store::connect::connect::<DB>(url, 1, &settings())
        .await
        .unwrap_or_else(|e| {
            panic!("{store} is required for these tests and is unreachable at {url}: {e}")
        });
    let mut conn = admin
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    conn.execute(statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    drop(conn);
    admin.close().await;
}

/// idem's migration files for the database of `url` (`postgres://`, `sqlite:` or
/// `mysql://`), in the order they apply: the repository's `migrations/<store>/*.sql`.
pub fn migration_files(url: &str) -> Vec<PathBuf> {
    let store = match url.split(':').next() {
        Some("postgres" | "postgresql") => "postgres",
        Some("sqlite") => "sqlite",
        Some("mysql" | "mariadb") => "mysql",
        _ => panic!("no migrations for {url}"),
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(store);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    files.retain(|file| file.extension().is_some_and(|e| e == "sql"));
    files.sort();
    files
}

/// Applies `files` to the database of `url` the way a team's own tooling would, with the
/// store's command-line client, one file after the other, stopping at the first error:
/// `psql -v ON_ERROR_STOP=1 -f FILE` (the URL as it is, its `options` and all), `sqlite3
/// -bail FILE < SQL`, or `mariadb` (else `mysql`) reading the file on its standard input.
/// idem's own runner takes no part: no `idem_schema_migrations` is written.
///
/// # Panics
/// When the client is missing or a file fails, with what the client said.
pub fn apply_with_client(url: &str, files: &[PathBuf]) {
    use std::process::{Command, Stdio};
    for file in files {
        let sql = std::fs::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut command = match url.split(':').next() {
            Some("postgres" | "postgresql") => {
                let mut psql = Command::new("psql");
                psql.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url]);
                psql.env("PGOPTIONS", "-c client_min_messages=warning");
                psql
            }
            Some("sqlite") => {
                let path = url.trim_start_matches("sqlite:").trim_start_matches("//");
                let path = path.split('?').next().unwrap_or(path);
                let mut sqlite3 = Command::new("sqlite3");
                sqlite3.args(["-bail", path]);
                sqlite3
            }
            Some("mysql" | "mariadb") => {
                let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
                let (user, rest) = rest.split_once('@').unwrap_or(("root", rest));
                let (host, database) = rest.split_once('/').unwrap_or((rest, ""));
                let (host, port) = host.split_once(':').unwrap_or((host, "3306"));
                let client = if Command::new("mariadb").arg("--version").output().is_ok() {
                    "mariadb"
                } else {
                    "mysql"
                };
                let mut mysql = Command::new(client);
                mysql.args(["-u", user, "-h", host, "-P", port, database]);
                mysql
            }
            _ => panic!("no client for {url}"),
        };
        let output = command
            .stdin(Stdio::from(sql))
            .output()
            .unwrap_or_else(|e| panic!("the store's client for {url} is required: {e}"));
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "{} through the client: {}{}",
            file.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The test matrix: every generic test body `name::<DB>()` of the invoking module as one
/// `#[tokio::test]` per store, `postgres::name`, `sqlite::name` and `mysql::name`.
///
/// Each store's module is compiled under the invoking crate's feature of the store's name
/// (`#[cfg(feature = "postgres")]`, `"sqlite"`, `"mysql"`): a store whose feature is off has
/// no tests. The invoking crate needs `tokio` (features `macros`, `rt-multi-thread`).
///
/// ```ignore
/// idem_testkit::on_every_store!(
///     // Options, each optional, in this order:
///     // - `#[flavor = current_thread]`: `#[tokio::test]` on one thread (by default
///     //   multi-threaded, two workers);
///     // - `#[run = observed]`: a plain `#[test]` that calls `observed(name::<DB>)` instead;
///     // - `#[with(A, …)]`: more generic arguments after the store, `name::<DB, A, …>()`;
///     // - `#[also module = store(A, …)]` (repeatable): one more module on one store, its
///     //   generic arguments those instead of `with`'s (staged mode with attempt holds, say).
///     #[also postgres_held = postgres(super::Held)]
///     // The bodies, each on every store or only on those in brackets (say why in a comment).
///     a_new_table_is_empty,
///     a_failed_commit [postgres, sqlite],
/// );
/// ```
///
/// The bodies are `super::name` from the store's module: define or import them where the
/// macro is invoked. The types of `with` and `also` are named from the store's module too
/// (`super::Held`).
#[macro_export]
macro_rules! on_every_store {
    (
        $(#[flavor = $flavor:ident])?
        $(#[run = $run:ident])?
        $(#[with($($with:ty),+ $(,)?)])?
        $(#[also $also:ident = $also_store:ident($($also_with:ty),+ $(,)?)])*
        $($case:ident $([$($only:ident),+ $(,)?])?),+ $(,)?
    ) => {
        $crate::on_every_store!(
            @targets [[$($flavor)?] [$($run)?]]
            [$($case [$($($only,)+ @)?])+]
            [postgres postgres [$($($with),+)?]]
            [sqlite sqlite [$($($with),+)?]]
            [mysql mysql [$($($with),+)?]]
            $([$also_store $also [$($also_with),+]])*
        );
    };
    // One module per target: its store, its name, its generic arguments after the store.
    (@targets $options:tt $cases:tt $([$store:ident $module:ident $with:tt])+) => {
        $($crate::on_every_store!(@module $store $module $with $options $cases);)+
    };
    (@module postgres $module:ident $with:tt $options:tt [$($case:ident $only:tt)+]) => {
        #[cfg(feature = "postgres")]
        mod $module {
            $($crate::on_every_store!(
                @case postgres $crate::__private::sqlx::Postgres, $with $options $case $only
            );)+
        }
    };
    (@module sqlite $module:ident $with:tt $options:tt [$($case:ident $only:tt)+]) => {
        #[cfg(feature = "sqlite")]
        mod $module {
            $($crate::on_every_store!(
                @case sqlite $crate::__private::sqlx::Sqlite, $with $options $case $only
            );)+
        }
    };
    (@module mysql $module:ident $with:tt $options:tt [$($case:ident $only:tt)+]) => {
        #[cfg(feature = "mysql")]
        mod $module {
            $($crate::on_every_store!(
                @case mysql $crate::__private::sqlx::MySql, $with $options $case $only
            );)+
        }
    };
    // A case on every store (`[]`), or on the stores it lists (`[store, …, @]`).
    (@case $store:ident $db:ty, $with:tt $options:tt $case:ident []) => {
        $crate::on_every_store!(@test $db, $with $options $case);
    };
    (@case $store:ident $db:ty, $with:tt $options:tt $case:ident [@]) => {};
    (@case postgres $db:ty, $with:tt $options:tt $case:ident [postgres, $($rest:tt)*]) => {
        $crate::on_every_store!(@test $db, $with $options $case);
    };
    (@case sqlite $db:ty, $with:tt $options:tt $case:ident [sqlite, $($rest:tt)*]) => {
        $crate::on_every_store!(@test $db, $with $options $case);
    };
    (@case mysql $db:ty, $with:tt $options:tt $case:ident [mysql, $($rest:tt)*]) => {
        $crate::on_every_store!(@test $db, $with $options $case);
    };
    (@case $store:ident $db:ty, $with:tt $options:tt $case:ident [$other:ident, $($rest:tt)*]) => {
        $crate::on_every_store!(@case $store $db, $with $options $case [$($rest)*]);
    };
    // The test itself.
    (@test $db:ty, [$($with:ty),*] [[$(multi_thread)?] []] $case:ident) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            super::$case::<$db $(, $with)*>().await;
        }
    };
    (@test $db:ty, [$($with:ty),*] [[current_thread] []] $case:ident) => {
        #[::tokio::test]
        async fn $case() {
            super::$case::<$db $(, $with)*>().await;
        }
    };
    (@test $db:ty, [$($with:ty),*] [[$($flavor:ident)?] [$run:ident]] $case:ident) => {
        #[test]
        fn $case() {
            super::$run(super::$case::<$db $(, $with)*>);
        }
    };
}
