//! Test harness: a fresh store on a real database per test, from idem-testkit's harness.
//!
//! PostgreSQL comes from `DATABASE_URL`, MySQL from `MYSQL_URL`, or the harness's defaults.
//! On PostgreSQL each test gets its own schema, so runs never collide; an unreachable server
//! fails the test: nothing is skipped. SQLite uses a new file in the system's temporary
//! directory; MySQL a new database.
#![allow(dead_code, clippy::unwrap_used)]

pub mod app;

use std::future::Future;
use std::time::Duration;

use idem_runtime::clock::{Clock as _, ManualClock, SystemClock};
#[cfg(feature = "mysql")]
use idem_runtime::sqlx::MySql;
use idem_runtime::sqlx::{self, Pool, Postgres, Sqlite};
use idem_runtime::{Config, Idem};
use idem_testkit::harness::TestBackend;

/// What the tests do on a backend's database besides the protocol.
pub trait TestDb: TestBackend {
    /// Creates the `effects` table the tests' work writes to.
    fn create_effects(pool: &Pool<Self>) -> impl Future<Output = ()> + Send;
    /// One business write in the key's transaction.
    fn write_effect(
        conn: &mut <Self as sqlx::Database>::Connection,
        note: &str,
    ) -> impl Future<Output = ()> + Send;
    /// A write that is only refused at COMMIT (a deferred foreign key).
    fn violate_at_commit(
        conn: &mut <Self as sqlx::Database>::Connection,
    ) -> impl Future<Output = ()> + Send;
    /// How many business writes were committed.
    fn count_effects(pool: &Pool<Self>) -> impl Future<Output = i64> + Send;
    /// How many key rows exist.
    fn count_keys(pool: &Pool<Self>) -> impl Future<Output = i64> + Send;
}

macro_rules! test_db {
    ($db:ty, $create:literal, $insert:literal, $deferred:expr) => {
        impl TestDb for $db {
            async fn create_effects(pool: &Pool<Self>) {
                sqlx::raw_sql($create).execute(pool).await.unwrap();
                for statement in $deferred {
                    sqlx::raw_sql(statement).execute(pool).await.unwrap();
                }
            }
            async fn write_effect(conn: &mut <Self as sqlx::Database>::Connection, note: &str) {
                // Unprepared: through a transaction pooler too (in the key's transaction).
                sqlx::query($insert)
                    .bind(note)
                    .persistent(false)
                    .execute(conn)
                    .await
                    .unwrap();
            }
            async fn violate_at_commit(conn: &mut <Self as sqlx::Database>::Connection) {
                assert!(
                    !$deferred.is_empty(),
                    "{} has no constraint checked at commit",
                    <Self as sqlx::Database>::NAME
                );
                sqlx::query("INSERT INTO deferred_child (parent_id) VALUES (99)")
                    .persistent(false)
                    .execute(conn)
                    .await
                    .unwrap();
            }
            async fn count_effects(pool: &Pool<Self>) -> i64 {
                count(pool, "SELECT count(*) FROM effects").await
            }
            async fn count_keys(pool: &Pool<Self>) -> i64 {
                count(pool, "SELECT count(*) FROM idempotency_keys").await
            }
        }
    };
}

/// The count `sql` answers, as one simple query (through a transaction pooler too).
async fn count<DB: sqlx::Database>(pool: &Pool<DB>, sql: &'static str) -> i64
where
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'r> i64: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use sqlx::Row as _;
    let row = sqlx::raw_sql(sql).fetch_one(pool).await.unwrap();
    row.get(0)
}

/// A constraint checked at commit: a `COMMIT` that fails (PostgreSQL, SQLite; MySQL has
/// none).
const DEFERRED: [&str; 2] = [
    "CREATE TABLE deferred_parent (id INTEGER PRIMARY KEY)",
    "CREATE TABLE deferred_child (parent_id INTEGER \
     REFERENCES deferred_parent (id) DEFERRABLE INITIALLY DEFERRED)",
];

test_db!(
    Postgres,
    "CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, note TEXT NOT NULL)",
    "INSERT INTO effects (note) VALUES ($1)",
    DEFERRED
);
test_db!(
    Sqlite,
    "CREATE TABLE effects (id INTEGER PRIMARY KEY, note TEXT NOT NULL)",
    "INSERT INTO effects (note) VALUES ($1)",
    DEFERRED
);
#[cfg(feature = "mysql")]
test_db!(
    MySql,
    "CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT NOT NULL)",
    "INSERT INTO effects (note) VALUES (?)",
    [] as [&str; 0]
);

/// `config`, with [`Config::transaction_pooler`] when the tests go through one
/// (`PGBOUNCER_URL`, idem-testkit's harness).
pub fn pooled(config: Config) -> Config {
    config.transaction_pooler(idem_testkit::harness::pooled().is_some())
}

/// A store on a fresh database, with a manual clock starting at the real time.
pub struct Harness<DB: TestDb> {
    pub idem: Idem<DB>,
    pub clock: ManualClock,
    pub url: String,
}

impl<DB: TestDb> Harness<DB> {
    pub async fn new() -> Self {
        Self::with_config(Config::default()).await
    }

    pub async fn with_config(config: Config) -> Self {
        let url = DB::fresh_url().await;
        let config = pooled(config);
        let clock = ManualClock::new(SystemClock.now_millis());
        let idem = Idem::<DB>::connect(&url, config)
            .await
            .unwrap()
            .with_clock(clock.clone());
        idem.migrate().await.unwrap();
        DB::create_effects(idem.pool()).await;
        Self { idem, clock, url }
    }

    /// A second, independent handle on the same database (another "process").
    pub async fn reopen(&self, config: Config) -> Idem<DB> {
        Idem::<DB>::connect(&self.url, pooled(config))
            .await
            .unwrap()
            .with_clock(self.clock.clone())
    }

    pub async fn effects(&self) -> i64 {
        DB::count_effects(self.idem.pool()).await
    }

    pub async fn keys(&self) -> i64 {
        DB::count_keys(self.idem.pool()).await
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}
