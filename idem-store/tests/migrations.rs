//! [`idem_store::migrate`] against the history it finds in `idem_schema_migrations`, on
//! every store whose feature is on: what it applies, what it leaves alone, which recorded
//! checksums it accepts.
#![allow(clippy::unwrap_used)]

mod common;

use common::run;
use idem_store::sqlx::{Database, Pool};
use idem_store::{KeyTable, StoreError};
use idem_testkit::harness::{TestBackend, apply_with_client, migration_files, settings};

/// `bytes` as a literal of the store's binary type.
fn bytes_literal<DB: Database>(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    match DB::NAME {
        "PostgreSQL" => format!("'\\x{hex}'::bytea"),
        _ => format!("X'{hex}'"),
    }
}

/// Records `checksum` for migration `version`.
async fn record_checksum<DB: TestBackend>(pool: &Pool<DB>, version: i64, checksum: &[u8]) {
    let sql = format!(
        "UPDATE idem_schema_migrations SET checksum = {} WHERE version = {version}",
        bytes_literal::<DB>(checksum)
    );
    run(pool, &sql).await;
}

/// `idem_schema_migrations`: (version, description), in version order.
async fn history<DB: TestBackend>(pool: &Pool<DB>) -> Vec<(i64, String)> {
    let rows = common::history(pool).await.into_iter();
    rows.map(|(version, description, _)| (version, description))
        .collect()
}

/// The migrations still to apply follow the recorded history: on a new database every one;
/// where the first is recorded (applied by hand, say), only those after it; a version a
/// newer idem recorded is left alone; a recorded checksum that is not the migration's
/// refuses the run, naming the version.
async fn pending_migrations_follow_the_history<DB: TestBackend>() {
    let migrations = DB::migrations();
    let every: Vec<(i64, String)> = migrations
        .iter()
        .map(|m| (m.version, m.description.to_owned()))
        .collect();
    let (_, table) = common::fresh::<DB>().await;
    assert_eq!(history(table.pool()).await, every);

    // The first migration applied and recorded by hand: only the others are applied (the
    // first again would record its version twice).
    let url = DB::fresh_url().await;
    apply_with_client(&url, &migration_files(&url)[..1]);
    let pool = idem_store::connect::connect::<DB>(&url, 2, &settings())
        .await
        .unwrap();
    run(&pool, DB::SQL.migrations.history).await;
    let first = &migrations[0];
    let record = format!(
        "INSERT INTO idem_schema_migrations (version, description, checksum) \
         VALUES ({}, 'by hand', {})",
        first.version,
        bytes_literal::<DB>(&first.checksum())
    );
    run(&pool, &record).await;
    let table = KeyTable::new(pool.clone());
    table.migrate().await.unwrap();
    let mut expected = every.clone();
    expected[0].1 = "by hand".to_owned();
    assert_eq!(history(&pool).await, expected);

    // A version from a newer idem is left alone.
    let newer = format!(
        "INSERT INTO idem_schema_migrations (version, description, checksum) \
         VALUES (999, 'newer', {})",
        bytes_literal::<DB>(&[1; 32])
    );
    run(&pool, &newer).await;
    table.migrate().await.unwrap();
    expected.push((999, "newer".to_owned()));
    assert_eq!(history(&pool).await, expected);

    // A checksum that is not the migration's.
    record_checksum(&pool, first.version, &[0; 32]).await;
    match table.migrate().await {
        Err(StoreError::Migrate { version, .. }) if version == first.version => {}
        other => panic!("{other:?}"),
    }
}

/// A migration's former checksums (what an earlier release applied under its version) are
/// accepted as well as its own, and nothing else is: not the same bytes changed, not zeros;
/// a migration without former checksums takes its own only (not another's former one,
/// where the store has both kinds).
async fn a_former_checksum_is_accepted_and_nothing_else<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let pool = table.pool();
    // Its own, recorded by the first run.
    table.migrate().await.unwrap();
    let refused = async |version: i64| match table.migrate().await {
        Err(StoreError::Migrate { version: v, .. }) if v == version => {}
        other => panic!("version {version}: {other:?}"),
    };
    let decode = |hex: &str| -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap())
            .collect()
    };
    let migrations = DB::migrations();
    // MySQL's first migration was rewritten since idem 0.1.0: the case is not empty there.
    assert_eq!(
        migrations.iter().any(|m| !m.former_checksums.is_empty()),
        DB::NAME == "MySQL"
    );
    for migration in migrations {
        for former in migration.former_checksums {
            let mut former = decode(former);
            record_checksum(pool, migration.version, &former).await;
            table.migrate().await.unwrap();
            if let Some(last) = former.last_mut() {
                *last ^= 1;
            }
            record_checksum(pool, migration.version, &former).await;
            refused(migration.version).await;
            record_checksum(pool, migration.version, &[0; 32]).await;
            refused(migration.version).await;
            record_checksum(pool, migration.version, &migration.checksum()).await;
            table.migrate().await.unwrap();
        }
    }
    // A migration without former checksums takes its own only.
    let plain = migrations.iter().find(|m| m.former_checksums.is_empty());
    let other = migrations.iter().find_map(|m| m.former_checksums.first());
    if let Some(plain) = plain {
        for wrong in [
            vec![0x00, 0xff],
            other.map(|hex| decode(hex)).unwrap_or_default(),
        ] {
            record_checksum(pool, plain.version, &wrong).await;
            refused(plain.version).await;
        }
    }
}

idem_testkit::on_every_store!(
    pending_migrations_follow_the_history,
    a_former_checksum_is_accepted_and_nothing_else,
);
