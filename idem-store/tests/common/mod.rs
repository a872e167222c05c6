//! The key table on real databases, beyond the conformance kit (`idem-testkit`): the generic
//! cases (`tests/key_table.rs` runs them on every store), and what the tests do on a store in
//! plain SQL, each test on a new database from the test harness (`idem_testkit::harness`).
//! Each store's own cases are in `tests/<store>.rs`.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use idem_store::sqlx::migrate::{Migrate, MigrateError, Migrator};
use idem_store::sqlx::{Database, Pool};
use idem_store::{Backend, KeyFilter, KeyRef, KeyStatus, KeyTable, StoredResponse, StoredStatus};
use idem_testkit::conformance::{HEADERS, put};
use idem_testkit::harness::{HOUR, NOW, TestBackend, new_dir, settings};

/// Runs `sql`, which takes no parameters, on `pool`.
pub async fn run<DB: Backend>(pool: &Pool<DB>, sql: &str) {
    let mut conn = pool.acquire().await.unwrap();
    DB::execute(&mut conn, sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The rows `sql`, which takes no parameters, returns on `pool`.
pub async fn rows<DB: Backend>(pool: &Pool<DB>, sql: &str) -> Vec<DB::Row> {
    let mut conn = pool.acquire().await.unwrap();
    DB::fetch_all(&mut conn, sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `idem_schema_migrations`: (version, description, checksum), in version order.
pub async fn history<DB: Backend>(pool: &Pool<DB>) -> Vec<(i64, String, Vec<u8>)> {
    let sql = "SELECT version, description, checksum FROM idem_schema_migrations \
               ORDER BY version";
    (rows(pool, sql).await.iter())
        .map(|row| {
            let version = DB::int(row, 0).unwrap();
            (
                version,
                DB::text(row, 1).unwrap(),
                DB::bytes(row, 2).unwrap(),
            )
        })
        .collect()
}

/// Versions in sqlx's `_sqlx_migrations`.
pub async fn sqlx_versions<DB: Backend>(pool: &Pool<DB>) -> Vec<i64> {
    let sql = "SELECT version FROM _sqlx_migrations ORDER BY version";
    (rows(pool, sql).await.iter())
        .map(|row| DB::int(row, 0).unwrap())
        .collect()
}

/// Where idem 0.1's migration lies (as sqlx applied it): `tests/legacy/<store>`. idem 0.1
/// had no MySQL store.
pub fn legacy_dir<DB: Database>() -> PathBuf {
    let store = match DB::NAME {
        "PostgreSQL" => "postgres",
        _ => "sqlite",
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/legacy")
        .join(store)
}

/// Runs sqlx's migrator from `dir`, as idem 0.1 and applications do.
pub async fn run_sqlx<DB: Backend>(
    pool: &Pool<DB>,
    dir: &Path,
    ignore_missing: bool,
) -> Result<(), MigrateError>
where
    DB::Connection: Migrate,
{
    let mut migrator = Migrator::new(dir).await?;
    migrator.set_ignore_missing(ignore_missing);
    let mut conn = pool.acquire().await.map_err(MigrateError::Execute)?;
    let result = migrator.run_direct(&mut *conn).await;
    if result.is_err() {
        // sqlx keeps its migration lock when it refuses the history (`VersionMissing`): this
        // session must not go back to the pool.
        conn.close_on_drop();
    }
    result
}

/// A `processing` row of `key` as idem 0.1's table holds it (staged mode writes them; atomic
/// mode does not), and on PostgreSQL its row in `idempotency_processing` once migration 5
/// made that table (on SQLite a trigger writes it).
/// Inserts a completed row with the columns idem 0.1 had (fingerprint `[7; 32]`, status 201,
/// the headers `HEADERS`, `body`): what a table of that version holds.
pub async fn insert_completed_legacy<DB: Backend>(
    pool: &Pool<DB>,
    key: KeyRef<'_>,
    created_ms: i64,
    expires_ms: i64,
    body: &[u8],
) {
    let KeyRef {
        scope,
        operation,
        key,
    } = key;
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let headers = StoredResponse::encode_headers(HEADERS).replace('\'', "''");
    let postgres = DB::NAME == "PostgreSQL";
    let bytes = |hex: &str| {
        if postgres {
            format!("decode('{hex}', 'hex')")
        } else {
            format!("X'{hex}'")
        }
    };
    let time = |ms: i64| {
        if postgres {
            format!("to_timestamp({ms}::float8 / 1000)")
        } else {
            format!("strftime('%Y-%m-%d %H:%M:%f', {ms} / 1000.0, 'unixepoch')")
        }
    };
    run(
        pool,
        &format!(
            "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
             response_status, response_headers, response_body, created_at, completed_at, \
             expires_at) VALUES ('{scope}', '{operation}', '{key}', {}, 'completed', 201, \
             '{headers}', {}, {}, {}, {})",
            bytes(&hex(&[7; 32])),
            bytes(&hex(body)),
            time(created_ms),
            time(created_ms + 5),
            time(expires_ms),
        ),
    )
    .await;
}

pub async fn insert_processing<DB: Backend>(
    pool: &Pool<DB>,
    key: KeyRef<'_>,
    created_ms: i64,
    expires_ms: i64,
) {
    let KeyRef {
        scope,
        operation,
        key,
    } = key;
    let (fingerprint, created, expires) = match DB::NAME {
        "PostgreSQL" => (
            "decode('00', 'hex')",
            format!("to_timestamp({created_ms}::float8 / 1000)"),
            format!("to_timestamp({expires_ms}::float8 / 1000)"),
        ),
        _ => (
            "X'00'",
            format!("strftime('%Y-%m-%d %H:%M:%f', {created_ms} / 1000.0, 'unixepoch')"),
            format!("strftime('%Y-%m-%d %H:%M:%f', {expires_ms} / 1000.0, 'unixepoch')"),
        ),
    };
    run(
        pool,
        &format!(
            "INSERT INTO idempotency_keys \
             (scope, operation, idempotency_key, fingerprint, status, created_at, expires_at) \
             VALUES ('{scope}', '{operation}', '{key}', {fingerprint}, 'processing', \
             {created}, {expires})"
        ),
    )
    .await;
    if DB::NAME == "PostgreSQL" {
        let mirror = format!(
            "INSERT INTO idempotency_processing VALUES ('{scope}', '{operation}', '{key}')"
        );
        let mut conn = pool.acquire().await.unwrap();
        // Before migration 5 the table does not exist (migration 5 fills it from the key
        // table): only then may this fail.
        if let Err(error) = DB::execute(&mut conn, &mirror, &[]).await {
            assert!(
                error.to_string().contains("idempotency_processing"),
                "{error}"
            );
        }
    }
}

/// A fresh database with the key table, through [`Backend::connect`].
pub async fn fresh<DB: TestBackend>() -> (String, KeyTable<DB>) {
    let url = DB::fresh_url().await;
    let table = KeyTable::new(
        idem_store::connect::connect::<DB>(&url, 4, &settings())
            .await
            .unwrap(),
    );
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
pub async fn upgrade_from_sqlx_layout<DB: TestBackend>()
where
    DB::Connection: Migrate,
{
    let url = DB::fresh_url().await;
    let pool = idem_store::connect::connect::<DB>(&url, 4, &settings())
        .await
        .unwrap();
    let app = new_dir("app-migrations");
    std::fs::write(
        app.join("20250101000000_things.sql"),
        "CREATE TABLE things (id BIGINT PRIMARY KEY, name TEXT NOT NULL);",
    )
    .unwrap();
    // idem 0.1 and the application, as they ran: each ignoring the other's versions.
    run_sqlx(&pool, &legacy_dir::<DB>(), true).await.unwrap();
    run_sqlx(&pool, &app, true).await.unwrap();
    assert_eq!(
        sqlx_versions(&pool).await,
        [20_250_101_000_000, 20_261_130_000_001]
    );
    // Without `set_ignore_missing(true)` the application's migrator used to fail.
    match run_sqlx(&pool, &app, false).await {
        Err(MigrateError::VersionMissing(20_261_130_000_001)) => {}
        other => panic!("expected VersionMissing before the upgrade, got {other:?}"),
    }
    // Rows idem 0.1 stored, in its columns.
    let old = key("tenant:t1", "create_order:v1", "k-old");
    insert_completed_legacy(&pool, old, NOW - HOUR, NOW + HOUR, b"{\"id\":1}").await;
    insert_processing(
        &pool,
        key("global", "sync:v1", "p-1"),
        NOW - HOUR,
        NOW + HOUR,
    )
    .await;

    let table = KeyTable::new(pool.clone());
    table.migrate().await.unwrap();

    // idem's history is its own; its old row left sqlx's, the application's stays.
    assert_eq!(history(&pool).await.len(), DB::migrations().len());
    assert_eq!(sqlx_versions(&pool).await, [20_250_101_000_000]);
    run_sqlx(&pool, &app, false).await.unwrap();
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
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, old, None)
        .await
        .unwrap()
        .unwrap();
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
    run_sqlx(&pool, &app, false).await.unwrap();
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
