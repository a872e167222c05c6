//! idem's migrations applied by another tool: the files of the repository's `migrations/`,
//! run in order by the store's own command-line client (`psql`, `sqlite3`, `mariadb`), then
//! checked by [`check_schema`], on every store whose feature is on.
#![allow(clippy::unwrap_used)]

use idem_store::sqlx::{Database, Executor};
use idem_store::{KeyRef, KeyTable, StoreError, check_schema};
use idem_testkit::harness::{HOUR, NOW, TestBackend, apply_with_client, migration_files, settings};
use sha2::{Digest as _, Sha256};

/// The files are the SQL idem embeds, one for one, in the order it applies them.
async fn the_files_are_what_idem_runs<DB: TestBackend>() {
    let files = migration_files(&DB::fresh_url().await);
    let migrations = DB::migrations();
    assert_eq!(files.len(), migrations.len(), "{files:?}");
    for (file, migration) in files.iter().zip(migrations) {
        assert!(
            file.ends_with(migration.file),
            "{file:?} {}",
            migration.file
        );
        let text = std::fs::read(file).unwrap();
        assert_eq!(
            <[u8; 32]>::from(Sha256::digest(&text)),
            migration.checksum()
        );
    }
}

/// Each prefix of the files, the empty one included, is refused naming the next migration;
/// all of them pass, and the key table then works, with no history of idem's written.
async fn applied_by_a_plain_client<DB: TestBackend>()
where
    for<'c> &'c mut <DB as Database>::Connection: Executor<'c, Database = DB>,
{
    let migrations = DB::migrations();
    for applied in 0..migrations.len() {
        let url = DB::fresh_url().await;
        apply_with_client(&url, &migration_files(&url)[..applied]);
        let pool = idem_store::connect::connect::<DB>(&url, 2, &settings())
            .await
            .unwrap();
        let missing = &migrations[applied];
        match check_schema(&pool).await {
            Err(error @ StoreError::Migrate { .. }) => {
                let StoreError::Migrate { version, .. } = &error else {
                    unreachable!()
                };
                assert_eq!(*version, missing.version, "{error}");
                let said = error.to_string();
                assert!(said.contains(missing.file), "{said}");
                assert!(said.contains(missing.description), "{said}");
            }
            other => panic!("{} of {} applied: {other:?}", applied, migrations.len()),
        }
        pool.close().await;
    }

    let url = DB::fresh_url().await;
    apply_with_client(&url, &migration_files(&url));
    let pool = idem_store::connect::connect::<DB>(&url, 2, &settings())
        .await
        .unwrap();
    check_schema(&pool).await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let history = (&mut *conn)
        .execute("SELECT count(*) FROM idem_schema_migrations")
        .await;
    drop(conn);
    assert!(history.is_err(), "idem wrote its history");
    let key = KeyRef {
        scope: "global",
        operation: "op:v1",
        key: "k",
    };
    let row = idem_store::NewRow {
        field_digests: None,
        key,
        fingerprint: &[7; 32],
        status: 201,
        headers_json: "[]",
        body: b"{}",
        created_ms: NOW,
        completed_ms: NOW,
        expires_ms: NOW + HOUR,
        replace_expired: false,
    };
    let mut conn = pool.acquire().await.unwrap();
    let tx = DB::begin(&mut conn, &settings(), None)
        .await
        .unwrap()
        .free()
        .unwrap();
    assert!(
        idem_store::protocol::insert_completed_and_commit::<DB>(tx, row, None)
            .await
            .unwrap()
    );
    drop(conn);
    let table = KeyTable::new(pool.clone());
    let stored = table.get(key, NOW).await.unwrap().unwrap();
    assert_eq!(stored.expires_at_ms, NOW + HOUR);
}

idem_testkit::on_every_store!(the_files_are_what_idem_runs, applied_by_a_plain_client);
