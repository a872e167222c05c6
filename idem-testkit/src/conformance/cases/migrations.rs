//! Migrations: applied once, recorded in `idem_schema_migrations`, checked on every run.

use idem_store::{KeyTable, Outbox, OutboxMessage, StoreError, enqueue};

use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{Must as _, connect, fresh, key, put, settings};
use crate::harness::{HOUR, NOW};

/// Migrating a new database applies every migration of [`idem_store::Backend::migrations`] in
/// order and records each (version, description, checksum); migrating again, through
/// [`KeyTable::migrate`] or [`idem_store::migrate`], changes nothing.
pub async fn migrations_apply_and_record_history<DB: ConformanceSql>() {
    let url = DB::fresh_url().await;
    let pool = connect::<DB>(&url, &settings()).await;
    assert!(
        DB::history(&pool).await.is_err(),
        "a new database has no idem_schema_migrations table"
    );
    idem_store::migrate(&pool)
        .await
        .must("migrating a new database");
    let expected: Vec<(i64, String, Vec<u8>)> = DB::migrations()
        .iter()
        .map(|m| (m.version, m.description.to_owned(), m.checksum().to_vec()))
        .collect();
    assert!(!expected.is_empty(), "the backend has no migrations");
    assert!(
        expected.windows(2).all(|w| w[0].0 < w[1].0),
        "migrations are in version order: {:?}",
        expected.iter().map(|m| m.0).collect::<Vec<_>>()
    );
    assert_eq!(expected[0].0, 1, "the first migration is version 1");
    let history = DB::history(&pool).await.must("reading the history");
    assert_eq!(history, expected, "the history after the first run");

    // What the tables hold survives migrating again.
    assert!(
        put(&pool, key("k"), NOW, NOW + HOUR, b"kept").await,
        "storing a key"
    );
    let mut tx = pool.begin().await.must("begin");
    let message = OutboxMessage::new("m-1", "conformance.kept", serde_json::json!({}));
    assert!(enqueue(&mut tx, &message, NOW, None).await.must("enqueue"));
    tx.commit().await.must("commit");

    let table = KeyTable::new(pool.clone());
    table.migrate().await.must("migrating again");
    idem_store::migrate(&pool)
        .await
        .must("migrating a third time");
    let again = DB::history(&pool).await.must("reading the history");
    assert_eq!(again, expected, "the history after migrating again");
    let counts = table.counts(NOW).await.must("counting keys");
    assert_eq!(counts.by_status.total(), 1, "keys after migrating again");
    let outbox = Outbox::new(pool.clone())
        .counts(NOW)
        .await
        .must("counting messages");
    assert_eq!(outbox.pending, 1, "messages after migrating again");
}

/// A recorded migration whose checksum is not the one this version has is refused
/// ([`StoreError::Migrate`] naming its version), every time.
pub async fn changed_checksum_is_refused<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    DB::tamper_checksum(table.pool(), 1)
        .await
        .must("overwriting the checksum of migration 1");
    match table.migrate().await {
        Err(StoreError::Migrate {
            version, reason, ..
        }) => {
            assert_eq!(version, 1, "the version of the refused migration");
            assert!(
                reason.contains("checksum"),
                "the reason names the checksum: {reason}"
            );
        }
        other => panic!("expected StoreError::Migrate for a tampered checksum, got {other:?}"),
    }
    let error = table
        .migrate()
        .await
        .expect_err("migrating again is refused again");
    assert!(error.is_migrate(), "{error:?}");
    assert!(
        error.to_string().contains("migration 1"),
        "the message names the migration: {error}"
    );
}

/// Versions recorded by a newer version of idem (during a rolling deploy) are left alone:
/// migrating succeeds and keeps them.
pub async fn unknown_migrations_are_left_alone<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let newer = DB::migrations()
        .last()
        .must("the backend's migrations")
        .version
        + 1000;
    DB::record_unknown_migration(table.pool(), newer, "from a newer idem")
        .await
        .must("recording an unknown migration");
    table
        .migrate()
        .await
        .must("migrating with a newer version recorded");
    let history = DB::history(table.pool()).await.must("reading the history");
    assert_eq!(
        history.len(),
        DB::migrations().len() + 1,
        "the history keeps the unknown version: {history:?}"
    );
    assert_eq!(
        history.last().map(|h| (h.0, h.1.as_str())),
        Some((newer, "from a newer idem")),
        "the unknown version, untouched"
    );
}

/// Four instances starting at once, each with its own pool: every one succeeds, and each
/// migration is applied once.
pub async fn concurrent_migrations<DB: ConformanceSql>() {
    let url = DB::fresh_url().await;
    let mut tables = Vec::new();
    for _ in 0..4 {
        tables.push(KeyTable::new(connect::<DB>(&url, &settings()).await));
    }
    let (a, b, c, d) = tokio::join!(
        tables[0].migrate(),
        tables[1].migrate(),
        tables[2].migrate(),
        tables[3].migrate()
    );
    for (i, result) in [a, b, c, d].into_iter().enumerate() {
        result.must(&format!("instance {i} migrating concurrently"));
    }
    let history = DB::history(tables[0].pool())
        .await
        .must("reading the history");
    let versions: Vec<i64> = history.iter().map(|h| h.0).collect();
    let expected: Vec<i64> = DB::migrations().iter().map(|m| m.version).collect();
    assert_eq!(versions, expected, "each migration recorded once");
}
