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
use idem_runtime::sqlx::{self, Pool};
use idem_runtime::store::Arg;
use idem_runtime::{Config, Idem};
use idem_testkit::harness::TestBackend;

/// What the tests do on a store's database besides the protocol, written once for every
/// store (through the store's own statement calls, which go as a transaction pooler needs
/// them when the tests run through one).
pub trait TestDb: TestBackend {
    /// Creates the `effects` table the tests' work writes to, and (except on MySQL, which
    /// has none) a constraint checked at commit: `deferred_child` refers to `deferred_parent`.
    fn create_effects(pool: &Pool<Self>) -> impl Future<Output = ()> + Send {
        async move {
            let id = match Self::NAME {
                "PostgreSQL" => "BIGSERIAL",
                "SQLite" => "INTEGER",
                _ => "BIGINT AUTO_INCREMENT",
            };
            let effects = format!("CREATE TABLE effects (id {id} PRIMARY KEY, note TEXT NOT NULL)");
            let mut conn = pool.acquire().await.unwrap();
            Self::execute(&mut conn, &effects, &[]).await.unwrap();
            if Self::NAME != "MySQL" {
                for statement in DEFERRED {
                    Self::execute(&mut conn, statement, &[]).await.unwrap();
                }
            }
        }
    }

    /// One business write in the key's transaction.
    fn write_effect(
        conn: &mut <Self as sqlx::Database>::Connection,
        note: &str,
    ) -> impl Future<Output = ()> + Send {
        async move {
            let sql = if Self::DIALECT.positional {
                "INSERT INTO effects (note) VALUES (?)"
            } else {
                "INSERT INTO effects (note) VALUES ($1)"
            };
            Self::execute(conn, sql, &[Arg::Text(note)]).await.unwrap();
        }
    }

    /// A write that is only refused at `COMMIT` (a deferred foreign key).
    fn violate_at_commit(
        conn: &mut <Self as sqlx::Database>::Connection,
    ) -> impl Future<Output = ()> + Send {
        async move {
            assert_ne!(
                Self::NAME,
                "MySQL",
                "MySQL has no constraint checked at commit"
            );
            let sql = "INSERT INTO deferred_child (parent_id) VALUES (99)";
            Self::execute(conn, sql, &[]).await.unwrap();
        }
    }

    /// How many business writes were committed.
    fn count_effects(pool: &Pool<Self>) -> impl Future<Output = i64> + Send {
        count(pool, "SELECT count(*) FROM effects")
    }

    /// How many key rows exist.
    fn count_keys(pool: &Pool<Self>) -> impl Future<Output = i64> + Send {
        count(pool, "SELECT count(*) FROM idempotency_keys")
    }
}

impl<DB: TestBackend> TestDb for DB {}

/// The count `sql` answers.
async fn count<DB: TestBackend>(pool: &Pool<DB>, sql: &'static str) -> i64 {
    let mut conn = pool.acquire().await.unwrap();
    let row = DB::fetch_optional(&mut conn, sql, &[]).await.unwrap();
    DB::int(&row.unwrap(), 0).unwrap()
}

/// A constraint checked at commit: a `COMMIT` that fails (PostgreSQL, SQLite).
const DEFERRED: [&str; 2] = [
    "CREATE TABLE deferred_parent (id INTEGER PRIMARY KEY)",
    "CREATE TABLE deferred_child (parent_id INTEGER \
     REFERENCES deferred_parent (id) DEFERRABLE INITIALLY DEFERRED)",
];

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
