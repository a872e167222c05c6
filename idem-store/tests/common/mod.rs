//! The key table on real databases: every case runs on PostgreSQL (`tests/postgres.rs`) and
//! SQLite (`tests/sqlite.rs`).
//!
//! PostgreSQL comes from `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`);
//! each test gets its own schema `idem_test_<uuid>`. An unreachable server fails the test:
//! nothing is skipped. SQLite uses a new file under the system's temporary directory.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_store::sqlx::Pool;
use idem_store::sqlx::migrate::MigrateError;
use idem_store::{
    Backend, Cursor, KeyFilter, KeyRef, KeyStatus, KeyTable, NewRow, StoreError, StoredResponse,
    StoredStatus, TxSettings,
};

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A fixed "now": the store never reads the clock, so tests need none.
pub const NOW: i64 = 1_800_000_000_000;
pub const HOUR: i64 = 3_600_000;

pub fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))
        .unwrap_or_else(|| DEFAULT_POSTGRES_URL.to_owned())
}

/// A new schema `idem_test_<uuid>` on the PostgreSQL of [`postgres_url`], as a URL whose
/// `search_path` is that schema.
#[cfg(feature = "postgres")]
pub async fn fresh_postgres_url() -> String {
    let url = postgres_url();
    let schema = unique("idem_test");
    let admin = idem_store::sqlx::PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL is required for these tests and is unreachable at {url}: {e}")
        });
    idem_store::sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}&application_name={schema}")
}

/// A new SQLite file under the system's temporary directory, as a URL.
#[cfg(feature = "sqlite")]
pub async fn fresh_sqlite_url() -> String {
    format!("sqlite://{}", temp_file(&unique("idem_test")).display())
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

pub fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("idem-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.db"))
}

pub fn settings() -> TxSettings {
    TxSettings {
        lock_timeout: Duration::from_secs(2),
        statement_timeout: Duration::from_secs(30),
        acquire_timeout: Duration::from_secs(30),
    }
}

/// A database of one backend, fresh for one test, and what the tests do on it in SQL.
pub trait TestDb: Backend {
    /// A URL to a new, empty database (PostgreSQL: a new schema; SQLite: a new file).
    fn fresh_url() -> impl Future<Output = String> + Send;
    /// Where idem 0.1's migration lies (as sqlx applied it).
    fn legacy_dir() -> PathBuf;
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
    /// Overwrites a recorded checksum.
    fn tamper_checksum(pool: &Pool<Self>, version: i64) -> impl Future<Output = ()> + Send;
    /// A `processing` row (staged mode writes them; atomic mode does not).
    fn insert_processing(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
        created_ms: i64,
        expires_ms: i64,
    ) -> impl Future<Output = ()> + Send;
    /// Sets a row's `response_headers` to text that is not JSON.
    fn corrupt_headers(pool: &Pool<Self>, key: KeyRef<'_>) -> impl Future<Output = ()> + Send;
    /// `n` completed keys `bulk-00000`… of `operation` in scope `global`, in one statement.
    fn insert_many(
        pool: &Pool<Self>,
        operation: &str,
        n: i64,
        expires_ms: i64,
    ) -> impl Future<Output = ()> + Send;
}

/// Implements [`TestDb`]'s SQL, which both backends share (`$1` works on both).
#[macro_export]
macro_rules! test_db_sql {
    ($processing:literal, $processing_mirror:literal, $many:literal) => {
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
        async fn tamper_checksum(pool: &sqlx::Pool<Self>, version: i64) {
            sqlx::query("UPDATE idem_schema_migrations SET checksum = $1 WHERE version = $2")
                .bind(vec![0_u8; 32])
                .bind(version)
                .execute(pool)
                .await
                .unwrap();
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
        async fn corrupt_headers(pool: &sqlx::Pool<Self>, key: idem_store::KeyRef<'_>) {
            sqlx::query(
                "UPDATE idempotency_keys SET response_headers = 'not json' \
                 WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
            )
            .bind(key.scope)
            .bind(key.operation)
            .bind(key.key)
            .execute(pool)
            .await
            .unwrap();
        }
        async fn insert_many(pool: &sqlx::Pool<Self>, operation: &str, n: i64, expires_ms: i64) {
            sqlx::query($many)
                .bind(operation)
                .bind(n)
                .bind($crate::common::NOW - $crate::common::HOUR)
                .bind(expires_ms)
                .execute(pool)
                .await
                .unwrap();
        }
    };
}

/// A fresh database with the key table, through [`Backend::connect`].
pub async fn fresh<DB: TestDb>() -> (String, KeyTable<DB>) {
    let url = DB::fresh_url().await;
    let table = KeyTable::new(DB::connect(&url, 4, &settings()).await.unwrap());
    table.migrate().await.unwrap();
    (url, table)
}

/// Stores a completed key through the protocol's primitives, as the runtime does.
pub async fn put<DB: TestDb>(
    pool: &Pool<DB>,
    key: KeyRef<'_>,
    created_ms: i64,
    expires_ms: i64,
    body: &[u8],
) -> bool {
    let mut conn = pool.acquire().await.unwrap();
    let tx = DB::begin(&mut conn, &settings(), None)
        .await
        .unwrap()
        .free()
        .unwrap();
    let headers = StoredResponse::encode_headers([
        ("content-type", "application/json"),
        ("location", "/things/'; --"),
    ]);
    DB::insert_completed_and_commit(
        tx,
        NewRow {
            key,
            fingerprint: &[7; 32],
            status: 201,
            headers_json: &headers,
            body,
            created_ms,
            completed_ms: created_ms + 5,
            expires_ms,
            replace_expired: false,
        },
    )
    .await
    .unwrap()
}

fn key<'a>(scope: &'a str, operation: &'a str, key: &'a str) -> KeyRef<'a> {
    KeyRef {
        scope,
        operation,
        key,
    }
}

fn keys_of(page: &idem_store::Page) -> Vec<String> {
    page.keys.iter().map(|row| row.key.clone()).collect()
}

// The cases.

pub async fn migrate_twice_is_a_noop<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    table.migrate().await.unwrap();
    idem_store::migrate(table.pool()).await.unwrap();
    let history = DB::history(table.pool()).await;
    let expected: Vec<(i64, String, Vec<u8>)> = DB::migrations()
        .iter()
        .map(|m| (m.version, m.description.to_owned(), m.checksum().to_vec()))
        .collect();
    assert_eq!(history, expected);
    assert_eq!(history[0].0, 1);
    // The key table is there and empty.
    assert_eq!(table.counts(NOW).await.unwrap().by_status.total(), 0);
}

pub async fn changed_checksum_is_refused<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    DB::tamper_checksum(table.pool(), 1).await;
    match table.migrate().await {
        Err(StoreError::Migrate {
            version, reason, ..
        }) => {
            assert_eq!(version, 1);
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected a refused migration, got {other:?}"),
    }
    let error = table.migrate().await.unwrap_err();
    assert!(error.is_migrate());
    assert!(error.to_string().contains("migration 1"), "{error}");
}

/// A database idem 0.1 migrated through sqlx, next to the application's own sqlx migrations,
/// upgrades: the key rows stay, and the application's migrator no longer needs
/// `set_ignore_missing(true)`.
pub async fn upgrade_from_sqlx_layout<DB: TestDb>() {
    let url = DB::fresh_url().await;
    let pool = DB::connect(&url, 4, &settings()).await.unwrap();
    let app = tempdir("app-migrations");
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
        [
            ("content-type".to_owned(), "application/json".to_owned()),
            ("location".to_owned(), "/things/'; --".to_owned())
        ]
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

/// Several instances starting at once: every one succeeds and each migration applies once.
pub async fn concurrent_migrations<DB: TestDb>() {
    let url = DB::fresh_url().await;
    let mut tables = Vec::new();
    for _ in 0..4 {
        let pool = DB::connect(&url, 2, &settings()).await.unwrap();
        tables.push(KeyTable::new(pool));
    }
    let runs: Vec<_> = tables
        .iter()
        .map(|table| {
            let table = table.clone();
            tokio::spawn(async move { table.migrate().await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    assert_eq!(
        DB::history(tables[0].pool()).await.len(),
        DB::migrations().len()
    );
}

pub async fn get_expire_delete<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    let k = key("tenant:t1", "create_order:v1", "k-1");
    assert!(table.get(k, NOW).await.unwrap().is_none());
    assert!(table.expire(k, NOW).await.unwrap().is_none());
    assert!(table.delete(k, NOW).await.unwrap().is_none());

    let created = NOW - HOUR;
    assert!(put(table.pool(), k, created, NOW + HOUR, b"\x00\xffbody").await);
    // The protocol refuses a second row for the key.
    assert!(!put(table.pool(), k, created, NOW + HOUR, b"other").await);
    let row = table.get(k, NOW).await.unwrap().unwrap();
    assert_eq!(row.key_ref(), k);
    assert_eq!(row.status, KeyStatus::Completed);
    assert_eq!(row.fingerprint, [7; 32]);
    assert_eq!(row.created_at_ms, created);
    assert_eq!(row.completed_at_ms, Some(created + 5));
    assert_eq!(row.expires_at_ms, NOW + HOUR);
    let response = row.response.clone().unwrap();
    assert_eq!(response.status, 201);
    assert_eq!(response.body.as_ref(), b"\x00\xffbody");
    // The same row is expired later on.
    assert_eq!(
        table.get(k, NOW + HOUR).await.unwrap().unwrap().status,
        KeyStatus::Expired
    );

    let (before, after) = table.expire(k, NOW).await.unwrap().unwrap();
    assert_eq!(before, row);
    assert_eq!(after.status, KeyStatus::Expired);
    assert_eq!(after.expires_at_ms, NOW);
    assert_eq!(
        after,
        idem_store::KeyRow {
            status: KeyStatus::Expired,
            expires_at_ms: NOW,
            ..row.clone()
        }
    );
    assert_eq!(table.get(k, NOW).await.unwrap().unwrap(), after);
    let mut conn = table.pool().acquire().await.unwrap();
    assert_eq!(
        DB::lookup(&mut conn, k)
            .await
            .unwrap()
            .unwrap()
            .expires_at_ms,
        NOW
    );
    drop(conn);
    // Expiring again later does not postpone the expiry.
    let (before, again) = table.expire(k, NOW + HOUR).await.unwrap().unwrap();
    assert_eq!(before, again);
    assert_eq!(again.expires_at_ms, NOW);

    let deleted = table.delete(k, NOW).await.unwrap().unwrap();
    assert_eq!(deleted, after);
    assert!(table.get(k, NOW).await.unwrap().is_none());
    assert!(table.delete(k, NOW).await.unwrap().is_none());
    // The key is free again.
    assert!(put(table.pool(), k, NOW, NOW + HOUR, b"again").await);
}

pub async fn replacing_an_expired_key<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    let k = key("global", "op:v1", "k");
    assert!(put(table.pool(), k, NOW - 2 * HOUR, NOW - HOUR, b"first").await);
    let row = |created_ms, expires_ms, body: &'static [u8]| NewRow {
        key: k,
        fingerprint: &[9; 32],
        status: 200,
        headers_json: "[]",
        body,
        created_ms,
        completed_ms: created_ms,
        expires_ms,
        replace_expired: true,
    };
    let mut conn = table.pool().acquire().await.unwrap();
    // An execution that began before the row expired does not replace it.
    let mut tx = DB::begin(&mut conn, &settings(), None)
        .await
        .unwrap()
        .free()
        .unwrap();
    let replaced = DB::insert_completed(&mut tx, row(NOW - 90 * 60_000, NOW + HOUR, b"early"))
        .await
        .unwrap();
    assert!(!replaced);
    tx.rollback().await.unwrap();
    // One that began after does.
    let mut tx = DB::begin(&mut conn, &settings(), None)
        .await
        .unwrap()
        .free()
        .unwrap();
    DB::savepoint(&mut tx).await.unwrap();
    DB::rollback_to_savepoint(&mut tx).await.unwrap();
    let replaced = DB::insert_completed(&mut tx, row(NOW, NOW + HOUR, b"second"))
        .await
        .unwrap();
    assert!(replaced);
    tx.commit().await.unwrap();
    let stored = DB::lookup(&mut conn, k).await.unwrap().unwrap();
    assert_eq!(stored.fingerprint, [9; 32]);
    assert_eq!(stored.expires_at_ms, NOW + HOUR);
    let response = stored.response.unwrap();
    assert_eq!(response.body.as_ref(), b"second");
    assert_eq!(response.status, 200);
    assert!(response.headers.is_empty());
}

/// Keys in every state, several scopes and operations.
async fn populate<DB: TestDb>(table: &KeyTable<DB>) {
    let pool = table.pool();
    for (scope, operation, k, expires) in [
        ("global", "create_order:v1", "a-1", NOW + HOUR),
        ("global", "create_order:v1", "a-2", NOW - 1),
        ("global", "create_order:v1", "b-1", NOW),
        ("global", "refund:v1", "a-1", NOW + HOUR),
        ("tenant:t1", "create_order:v1", "a-1", NOW + HOUR),
        ("tenant:t1", "create_order:v1", "a-3", NOW - HOUR),
        ("tenant:t2", "refund:v1", "c-1", NOW + 1),
    ] {
        assert!(
            put(
                pool,
                key(scope, operation, k),
                NOW - 2 * HOUR,
                expires,
                b"{}"
            )
            .await
        );
    }
    DB::insert_processing(
        pool,
        key("tenant:t1", "create_order:v1", "p-1"),
        NOW - HOUR,
        NOW + HOUR,
    )
    .await;
}

pub async fn list_filters<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    populate(&table).await;
    let list = |filter: KeyFilter| {
        let table = table.clone();
        async move {
            let page = table.list(&filter, NOW).await.unwrap();
            assert!(page.next.is_none());
            page.keys
                .iter()
                .map(|row| format!("{} {} {} {}", row.scope, row.operation, row.key, row.status))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list(KeyFilter::new()).await,
        [
            "global create_order:v1 a-1 completed",
            "global create_order:v1 a-2 expired",
            "global create_order:v1 b-1 expired",
            "global refund:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-3 expired",
            "tenant:t1 create_order:v1 p-1 processing",
            "tenant:t2 refund:v1 c-1 completed",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().status(KeyStatus::Expired)).await,
        [
            "global create_order:v1 a-2 expired",
            "global create_order:v1 b-1 expired",
            "tenant:t1 create_order:v1 a-3 expired",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().status(KeyStatus::Completed)).await,
        [
            "global create_order:v1 a-1 completed",
            "global refund:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-1 completed",
            "tenant:t2 refund:v1 c-1 completed",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().status(KeyStatus::Processing)).await,
        ["tenant:t1 create_order:v1 p-1 processing"]
    );
    assert!(
        list(KeyFilter::new().status(KeyStatus::Stuck))
            .await
            .is_empty()
    );
    assert_eq!(
        list(KeyFilter::new().operation("refund:v1")).await,
        [
            "global refund:v1 a-1 completed",
            "tenant:t2 refund:v1 c-1 completed",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().scope("tenant:t1")).await,
        [
            "tenant:t1 create_order:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-3 expired",
            "tenant:t1 create_order:v1 p-1 processing",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().key_prefix("a-")).await.len(),
        5,
        "a-1 ×3, a-2, a-3"
    );
    // Exact matches only: no prefix match on operation or scope.
    assert!(list(KeyFilter::new().operation("refund")).await.is_empty());
    assert!(list(KeyFilter::new().scope("tenant")).await.is_empty());
    // Everything at once.
    assert_eq!(
        list(
            KeyFilter::new()
                .status(KeyStatus::Expired)
                .scope("global")
                .operation("create_order:v1")
                .key_prefix("a")
        )
        .await,
        ["global create_order:v1 a-2 expired"]
    );
    // The same rows later: everything completed has expired.
    let later = table
        .list(&KeyFilter::new().status(KeyStatus::Expired), NOW + HOUR)
        .await
        .unwrap();
    assert_eq!(later.keys.len(), 7);
    assert!(later.keys.iter().all(|r| r.status == KeyStatus::Expired));
}

pub async fn prefixes_are_literal<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    let keys = [
        "a%b1", "a%b2", "axb1", "a_c", "abc", "A%b3", "a[1]", "a1]", "a*1", "a?1", "a!1", "a\\1",
        "a\\\\",
    ];
    for k in keys {
        assert!(
            put(
                table.pool(),
                key("global", "op:v1", k),
                NOW,
                NOW + HOUR,
                b""
            )
            .await
        );
    }
    let with = |prefix: &str| {
        let table = table.clone();
        let filter = KeyFilter::new().key_prefix(prefix);
        async move {
            let mut found = keys_of(&table.list(&filter, NOW).await.unwrap());
            found.sort();
            found
        }
    };
    assert_eq!(with("a%").await, ["a%b1", "a%b2"]);
    assert_eq!(with("a%b1").await, ["a%b1"]);
    assert_eq!(with("a_").await, ["a_c"]);
    assert_eq!(with("A").await, ["A%b3"], "case-sensitive");
    assert_eq!(with("a[").await, ["a[1]"]);
    assert_eq!(with("a1]").await, ["a1]"]);
    assert_eq!(with("a*").await, ["a*1"]);
    assert_eq!(with("a?").await, ["a?1"]);
    assert_eq!(with("a!").await, ["a!1"]);
    assert_eq!(with("a\\").await, ["a\\1", "a\\\\"]);
    assert_eq!(with("a\\\\").await, ["a\\\\"]);
    assert_eq!(with("").await.len(), keys.len());
    assert!(with("zz").await.is_empty());
}

pub async fn pagination<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    let mut all = BTreeSet::new();
    for scope in ["global", "tenant:t1"] {
        for operation in ["op:v1", "op:v2"] {
            for i in 0..6 {
                let k = format!("k-{i:02}");
                assert!(
                    put(
                        table.pool(),
                        key(scope, operation, &k),
                        NOW,
                        NOW + HOUR,
                        b""
                    )
                    .await
                );
                all.insert((scope.to_owned(), operation.to_owned(), k));
            }
        }
    }
    let everything = table
        .list(&KeyFilter::new().limit(1000), NOW)
        .await
        .unwrap();
    assert_eq!(everything.keys.len(), 24);
    assert!(everything.next.is_none());
    let order: Vec<_> = everything
        .keys
        .iter()
        .map(|r| (r.scope.clone(), r.operation.clone(), r.key.clone()))
        .collect();
    // (scope, operation, key) order, which for these values is also byte order.
    assert_eq!(order, all.iter().cloned().collect::<Vec<_>>());

    let mut filter = KeyFilter::new().limit(5);
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = table.list(&filter, NOW).await.unwrap();
        pages += 1;
        assert!(page.keys.len() <= 5);
        seen.extend(
            page.keys
                .iter()
                .map(|r| (r.scope.clone(), r.operation.clone(), r.key.clone())),
        );
        if pages == 2 {
            // Changes behind and ahead of the cursor meanwhile: the pages go on from where
            // they were, neither repeating nor skipping the keys that stayed.
            assert!(
                put(
                    table.pool(),
                    key("global", "op:v1", "k-00a"),
                    NOW,
                    NOW + HOUR,
                    b""
                )
                .await
            );
            assert!(
                put(
                    table.pool(),
                    key("tenant:t1", "op:v2", "k-99"),
                    NOW,
                    NOW + HOUR,
                    b""
                )
                .await
            );
            let cursor = page.next.clone().unwrap();
            table.delete(cursor.key(), NOW).await.unwrap().unwrap();
        }
        match page.next {
            Some(next) => {
                // Cursors survive being written out and read back.
                let next: Cursor = next.to_string().parse().unwrap();
                filter.after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(pages, 5, "24 + 1 keys, 5 a page");
    let mut expected = order.clone();
    expected.push(("tenant:t1".into(), "op:v2".into(), "k-99".into()));
    assert_eq!(seen, expected);
    // Exactly a page's worth left: the last full page says there is no next.
    let mut filter = KeyFilter::new().limit(4).scope("global");
    let mut count = 0;
    loop {
        let page = table.list(&filter, NOW).await.unwrap();
        count += page.keys.len();
        match page.next {
            Some(next) => filter.after = Some(next),
            None => break,
        }
    }
    assert_eq!(
        count, 12,
        "7 keys of op:v1 (one added), 5 of op:v2 (one deleted)"
    );
}

pub async fn limits_are_clamped<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    DB::insert_many(table.pool(), "bulk:v1", 1005, NOW + HOUR).await;
    let page = table
        .list(&KeyFilter::new().limit(5000), NOW)
        .await
        .unwrap();
    assert_eq!(page.keys.len(), 1000);
    assert_eq!(page.keys[999].key, "bulk-00999");
    let rest = table
        .list(&KeyFilter::new().limit(5000).after(page.next), NOW)
        .await
        .unwrap();
    assert_eq!(rest.keys.len(), 5);
    assert!(rest.next.is_none());
    let one = table.list(&KeyFilter::new().limit(0), NOW).await.unwrap();
    assert_eq!(keys_of(&one), ["bulk-00000"]);
    assert!(one.next.is_some());
    let default = table.list(&KeyFilter::new(), NOW).await.unwrap();
    assert_eq!(default.keys.len(), 50);
}

pub async fn invalid_cursor_is_an_error() {
    match "not a cursor".parse::<Cursor>() {
        Err(StoreError::InvalidCursor) => {}
        other => panic!("{other:?}"),
    }
}

pub async fn counts<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    let empty = table.counts(NOW).await.unwrap();
    assert_eq!(empty.by_status.total(), 0);
    assert!(empty.by_operation.is_empty());
    populate(&table).await;
    let counts = table.counts(NOW).await.unwrap();
    assert_eq!(
        counts.by_status,
        idem_store::StatusCounts {
            completed: 4,
            processing: 1,
            stuck: 0,
            expired: 3,
        }
    );
    assert_eq!(counts.by_operation.len(), 2);
    let orders = counts.by_operation["create_order:v1"];
    assert_eq!(
        (orders.completed, orders.processing, orders.expired),
        (2, 1, 3)
    );
    let refunds = counts.by_operation["refund:v1"];
    assert_eq!((refunds.completed, refunds.expired), (2, 0));
    assert_eq!(refunds.get(KeyStatus::Completed), 2);
    assert_eq!(counts.oldest_stuck_created_at_ms, None);
    assert!(counts.table_bytes.is_some_and(|b| b > 0), "{counts:?}");
    // Later, everything completed has expired.
    let later = table.counts(NOW + HOUR).await.unwrap();
    assert_eq!(later.by_status.expired, 7);
    assert_eq!(later.by_status.processing, 1);
}

pub async fn sweep_deletes_only_expired<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    populate(&table).await;
    // Expired by NOW - 1: a-2 (NOW - 1), a-3 (NOW - HOUR). Not b-1 (NOW).
    assert_eq!(table.sweep_batch(NOW - 1, 1).await.unwrap(), 1);
    assert_eq!(
        table.sweep_batch(NOW - 1, 0).await.unwrap(),
        1,
        "batch 0 is 1"
    );
    assert_eq!(table.sweep_batch(NOW - 1, 10).await.unwrap(), 0);
    let left = table.list(&KeyFilter::new(), NOW).await.unwrap();
    assert_eq!(left.keys.len(), 6);
    assert!(
        left.keys
            .iter()
            .all(|r| r.expires_at_ms > NOW - 1 && r.key != "a-2" && r.key != "a-3")
    );
    assert_eq!(table.sweep_batch(NOW, 10).await.unwrap(), 1, "b-1");
    let counts = table.counts(NOW).await.unwrap();
    assert_eq!(counts.by_status.expired, 0);
    assert_eq!(counts.by_status.total(), 5);
}

pub async fn unreadable_rows<DB: TestDb>() {
    let (_, table) = fresh::<DB>().await;
    let k = key("global", "op:v1", "k");
    assert!(put(table.pool(), k, NOW, NOW + HOUR, b"body").await);
    DB::corrupt_headers(table.pool(), k).await;
    // Tools are told…
    match table.get(k, NOW).await {
        Err(StoreError::Corrupt(what)) => assert!(what.contains("headers"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        table.list(&KeyFilter::new(), NOW).await,
        Err(StoreError::Corrupt(_))
    ));
    // …the protocol replays what it can…
    let mut conn = table.pool().acquire().await.unwrap();
    let stored = DB::lookup(&mut conn, k).await.unwrap().unwrap();
    drop(conn);
    let response = stored.response.unwrap();
    assert!(response.headers.is_empty());
    assert_eq!(response.body.as_ref(), b"body");
    // …and the row can still be deleted.
    assert!(table.delete(k, NOW).await.is_err());
    assert!(table.get(k, NOW).await.unwrap().is_none());
}

pub fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("idem-tests").join(unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One `#[tokio::test]` per case, on `$db`.
#[macro_export]
macro_rules! cases {
    ($db:ty: $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                common::$name::<$db>().await;
            }
        )*
    };
}

/// Every generic case.
#[macro_export]
macro_rules! all_cases {
    ($db:ty) => {
        $crate::cases!(
            $db: migrate_twice_is_a_noop,
            changed_checksum_is_refused,
            upgrade_from_sqlx_layout,
            concurrent_migrations,
            get_expire_delete,
            replacing_an_expired_key,
            list_filters,
            prefixes_are_literal,
            pagination,
            limits_are_clamped,
            counts,
            sweep_deletes_only_expired,
            unreadable_rows,
        );

        #[tokio::test]
        async fn invalid_cursor_is_an_error() {
            common::invalid_cursor_is_an_error().await;
        }
    };
}
