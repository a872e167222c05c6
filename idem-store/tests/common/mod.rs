//! The key table on real databases, beyond the conformance kit (`idem-testkit`): the generic
//! cases (`tests/key_table.rs` runs them on every store), and what the tests do on a store in
//! SQL ([`TestDb`]), each test on a new database from the test harness
//! (`idem_testkit::harness`: PostgreSQL from `DATABASE_URL` or the harness's default, a schema
//! `idem_test_<uuid>` per test; SQLite, a new file; MySQL from `MYSQL_URL`, a new database).
//! Each store's own cases are in `tests/<store>.rs`.
#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::path::{Path, PathBuf};

use idem_store::sqlx::Pool;
use idem_store::sqlx::migrate::MigrateError;
use idem_store::{KeyFilter, KeyRef, KeyStatus, KeyTable, StoredStatus};
use idem_testkit::conformance::{HEADERS, put};
use idem_testkit::harness::{HOUR, NOW, TestBackend, new_dir, settings};

/// What the tests do on a backend's database in SQL.
pub trait TestDb: TestBackend {
    /// Where idem 0.1's migration lies (as sqlx applied it): `tests/legacy/<backend>`.
    fn legacy_dir() -> PathBuf {
        let backend = match <Self as idem_store::sqlx::Database>::NAME {
            "PostgreSQL" => "postgres",
            _ => "sqlite",
        };
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/legacy")
            .join(backend)
    }
    /// Runs sqlx's migrator from `dir`, as idem 0.1 and applications do.
    fn run_sqlx(
        pool: &Pool<Self>,
        dir: &Path,
        ignore_missing: bool,
    ) -> impl Future<Output = Result<(), MigrateError>> + Send;
    /// Versions in `_sqlx_migrations`.
    fn sqlx_versions(pool: &Pool<Self>) -> impl Future<Output = Vec<i64>> + Send;
    /// `idem_schema_migrations`: (version, description, checksum).
    fn history(pool: &Pool<Self>) -> impl Future<Output = Vec<(i64, String, Vec<u8>)>> + Send;
    /// A `processing` row (staged mode writes them; atomic mode does not).
    fn insert_processing(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        created_ms: i64,
        expires_ms: i64,
    ) -> impl Future<Output = ()> + Send;
}

/// Implements [`TestDb`]'s SQL, which both backends share (`$1` works on both).
#[macro_export]
macro_rules! test_db_sql {
    ($processing:literal, $processing_mirror:literal) => {
        fn run_sqlx(
            pool: &sqlx::Pool<Self>,
            dir: &std::path::Path,
            ignore_missing: bool,
        ) -> impl std::future::Future<Output = Result<(), sqlx::migrate::MigrateError>> + Send {
            async move {
                let mut migrator = sqlx::migrate::Migrator::new(dir).await?;
                migrator.set_ignore_missing(ignore_missing);
                let mut conn = pool
                    .acquire()
                    .await
                    .map_err(sqlx::migrate::MigrateError::Execute)?;
                let result = migrator.run_direct(&mut *conn).await;
                if result.is_err() {
                    // sqlx keeps its migration lock when it refuses the history
                    // (`VersionMissing`): this session must not go back to the pool.
                    conn.close_on_drop();
                }
                result
            }
        }
        async fn sqlx_versions(pool: &sqlx::Pool<Self>) -> Vec<i64> {
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(pool)
                .await
                .unwrap()
        }
        async fn history(pool: &sqlx::Pool<Self>) -> Vec<(i64, String, Vec<u8>)> {
            sqlx::query_as(
                "SELECT version, description, checksum FROM idem_schema_migrations \
                 ORDER BY version",
            )
            .fetch_all(pool)
            .await
            .unwrap()
        }
        async fn insert_processing(
            pool: &sqlx::Pool<Self>,
            key: idem_store::KeyRef<'_>,
            created_ms: i64,
            expires_ms: i64,
        ) {
            sqlx::query($processing)
                .bind(key.scope)
                .bind(key.operation)
                .bind(key.key)
                .bind(created_ms)
                .bind(expires_ms)
                .execute(pool)
                .await
                .unwrap();
            if !$processing_mirror.is_empty() {
                // Before migration 5 the table does not exist (migration 5 fills it from
                // the key table): only then may this fail.
                let mirrored = sqlx::query($processing_mirror)
                    .bind(key.scope)
                    .bind(key.operation)
                    .bind(key.key)
                    .execute(pool)
                    .await;
                if let Err(error) = mirrored {
                    assert!(
                        error.to_string().contains("idempotency_processing"),
                        "{error}"
                    );
                }
            }
        }
    };
}

#[cfg(feature = "postgres")]
impl TestDb for idem_store::sqlx::Postgres {
    // A processing row, and its row in `idempotency_processing` as staged mode's
    // reservation writes both (on SQLite a trigger writes the second).
    crate::test_db_sql!(
        "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, created_at, expires_at) \
         VALUES ($1, $2, $3, decode('00', 'hex'), 'processing', \
         to_timestamp($4::float8 / 1000), to_timestamp($5::float8 / 1000))",
        "INSERT INTO idempotency_processing VALUES ($1, $2, $3)"
    );
}

#[cfg(feature = "sqlite")]
impl TestDb for idem_store::sqlx::Sqlite {
    crate::test_db_sql!(
        "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, created_at, expires_at) \
         VALUES (?1, ?2, ?3, X'00', 'processing', \
         strftime('%Y-%m-%d %H:%M:%f', ?4 / 1000.0, 'unixepoch'), \
         strftime('%Y-%m-%d %H:%M:%f', ?5 / 1000.0, 'unixepoch'))",
        // The key table's trigger writes `idempotency_processing`.
        ""
    );
}

/// A fresh database with the key table, through [`Backend::connect`].
pub async fn fresh<DB: TestBackend>() -> (String, KeyTable<DB>) {
    let url = DB::fresh_url().await;
    let table = KeyTable::new(DB::connect(&url, 4, &settings()).await.unwrap());
    table.migrate().await.unwrap();
    (url, table)
}

fn key<'a>(scope: &'a str, operation: &'a str, key: &'a str) -> KeyRef<'a> {
    KeyRef {
        scope,
        operation,
        key,
    }
}

// The cases.

/// A database idem 0.1 migrated through sqlx, next to the application's own sqlx migrations,
/// upgrades: the key rows stay, and the application's migrator no longer needs
/// `set_ignore_missing(true)`.
pub async fn upgrade_from_sqlx_layout<DB: TestDb>() {
    let url = DB::fresh_url().await;
    let pool = DB::connect(&url, 4, &settings()).await.unwrap();
    let app = new_dir("app-migrations");
    std::fs::write(
        app.join("20250101000000_things.sql"),
        "CREATE TABLE things (id BIGINT PRIMARY KEY, name TEXT NOT NULL);",
    )
    .unwrap();
    // idem 0.1 and the application, as they ran: each ignoring the other's versions.
    DB::run_sqlx(&pool, &DB::legacy_dir(), true).await.unwrap();
    DB::run_sqlx(&pool, &app, true).await.unwrap();
    assert_eq!(
        DB::sqlx_versions(&pool).await,
        [20_250_101_000_000, 20_261_130_000_001]
    );
    // Without `set_ignore_missing(true)` the application's migrator used to fail.
    match DB::run_sqlx(&pool, &app, false).await {
        Err(MigrateError::VersionMissing(20_261_130_000_001)) => {}
        other => panic!("expected VersionMissing before the upgrade, got {other:?}"),
    }
    // Rows idem 0.1 stored.
    let old = key("tenant:t1", "create_order:v1", "k-old");
    assert!(put(&pool, old, NOW - HOUR, NOW + HOUR, b"{\"id\":1}").await);
    DB::insert_processing(
        &pool,
        key("global", "sync:v1", "p-1"),
        NOW - HOUR,
        NOW + HOUR,
    )
    .await;

    let table = KeyTable::new(pool.clone());
    table.migrate().await.unwrap();

    // idem's history is its own; its old row left sqlx's, the application's stays.
    assert_eq!(DB::history(&pool).await.len(), DB::migrations().len());
    assert_eq!(DB::sqlx_versions(&pool).await, [20_250_101_000_000]);
    DB::run_sqlx(&pool, &app, false).await.unwrap();
    // The processing row is found where listings of processing keys look (migration 5
    // filled `idempotency_processing` from the key table).
    let processing = table
        .list(&KeyFilter::new().status(KeyStatus::Processing), NOW)
        .await
        .unwrap();
    assert_eq!(processing.keys.len(), 1);
    assert_eq!(processing.keys[0].key, "p-1");
    // The old rows read back, through the protocol and through the tools' API.
    let mut conn = pool.acquire().await.unwrap();
    let stored = DB::lookup(&mut conn, old).await.unwrap().unwrap();
    drop(conn);
    assert_eq!(stored.status, StoredStatus::Completed);
    assert_eq!(stored.fingerprint, [7; 32]);
    let response = stored.response.unwrap();
    assert_eq!(response.status, 201);
    assert_eq!(response.body.as_ref(), b"{\"id\":1}");
    assert_eq!(
        response.headers,
        HEADERS.map(|(name, value)| (name.to_owned(), value.to_owned()))
    );
    let row = table.get(old, NOW).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Completed);
    assert_eq!(row.response.unwrap(), response);
    let processing = table
        .get(key("global", "sync:v1", "p-1"), NOW)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(processing.status, KeyStatus::Processing);
    // And migrating again changes nothing.
    table.migrate().await.unwrap();
    DB::run_sqlx(&pool, &app, false).await.unwrap();
    assert_eq!(table.counts(NOW).await.unwrap().by_status.total(), 2);
}

/// The key table's size, which every store can tell.
pub async fn table_size_is_reported<DB: TestBackend>() {
    let (_, table) = fresh::<DB>().await;
    let k = key("global", "op:v1", "k");
    assert!(put(table.pool(), k, NOW, NOW + HOUR, b"body").await);
    let counts = table.counts(NOW).await.unwrap();
    assert!(counts.table_bytes.is_some_and(|b| b > 0), "{counts:?}");
}
