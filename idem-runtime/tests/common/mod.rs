//! Test harness: a fresh store on a real database per test.
//!
//! PostgreSQL comes from `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`);
//! each test gets its own schema, so runs never collide. An unreachable server fails the
//! test: nothing is skipped. SQLite uses a new file in the system's temporary directory.
#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use idem_runtime::clock::{Clock as _, ManualClock, SystemClock};
use idem_runtime::sqlx::{self, Pool, Postgres, Sqlite};
use idem_runtime::store::Backend;
use idem_runtime::{Config, Idem};

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

pub fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))
        .unwrap_or_else(|| DEFAULT_POSTGRES_URL.to_owned())
}

fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A database of one backend, fresh for one test.
pub trait TestDb: Backend {
    /// A URL to a new, empty database (PostgreSQL: a new schema; SQLite: a new file).
    fn fresh_url() -> impl Future<Output = String> + Send;
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
    ($db:ty, $create:literal) => {
        impl TestDb for $db {
            fn fresh_url() -> impl Future<Output = String> + Send {
                fresh_url_of::<$db>()
            }
            async fn create_effects(pool: &Pool<Self>) {
                sqlx::query($create).execute(pool).await.unwrap();
                sqlx::query("CREATE TABLE deferred_parent (id INTEGER PRIMARY KEY)")
                    .execute(pool)
                    .await
                    .unwrap();
                sqlx::query(
                    "CREATE TABLE deferred_child (parent_id INTEGER \
                     REFERENCES deferred_parent (id) DEFERRABLE INITIALLY DEFERRED)",
                )
                .execute(pool)
                .await
                .unwrap();
            }
            async fn write_effect(conn: &mut <Self as sqlx::Database>::Connection, note: &str) {
                sqlx::query("INSERT INTO effects (note) VALUES ($1)")
                    .bind(note)
                    .execute(conn)
                    .await
                    .unwrap();
            }
            async fn violate_at_commit(conn: &mut <Self as sqlx::Database>::Connection) {
                sqlx::query("INSERT INTO deferred_child (parent_id) VALUES (99)")
                    .execute(conn)
                    .await
                    .unwrap();
            }
            async fn count_effects(pool: &Pool<Self>) -> i64 {
                sqlx::query_scalar("SELECT count(*) FROM effects")
                    .fetch_one(pool)
                    .await
                    .unwrap()
            }
            async fn count_keys(pool: &Pool<Self>) -> i64 {
                sqlx::query_scalar("SELECT count(*) FROM idempotency_keys")
                    .fetch_one(pool)
                    .await
                    .unwrap()
            }
        }
    };
}

test_db!(
    Postgres,
    "CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, note TEXT NOT NULL)"
);
test_db!(
    Sqlite,
    "CREATE TABLE effects (id INTEGER PRIMARY KEY, note TEXT NOT NULL)"
);

trait FreshUrl {
    fn fresh() -> impl Future<Output = String> + Send;
}

impl FreshUrl for Postgres {
    async fn fresh() -> String {
        let url = postgres_url();
        let schema = unique("idem_test");
        let admin = sqlx::PgPool::connect(&url).await.unwrap_or_else(|e| {
            panic!("PostgreSQL is required for these tests and is unreachable at {url}: {e}")
        });
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        let separator = if url.contains('?') { '&' } else { '?' };
        // The schema's name doubles as the application name, so a test can find its sessions.
        format!("{url}{separator}options=-c%20search_path%3D{schema}&application_name={schema}")
    }
}

impl FreshUrl for Sqlite {
    async fn fresh() -> String {
        format!("sqlite://{}", temp_file(&unique("idem_test")).display())
    }
}

async fn fresh_url_of<DB: FreshUrl>() -> String {
    DB::fresh().await
}

pub fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("idem-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.db"))
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
        Idem::<DB>::connect(&self.url, config)
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

/// Runs one generic test body on both backends.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<idem_runtime::sqlx::Postgres>().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<idem_runtime::sqlx::Sqlite>().await;
                }
            )*
        }
    };
}
