//! The key table on MySQL / MariaDB (`MYSQL_URL`, or the harness's default; a new database
//! `idem_test_<uuid>` per test): what is MySQL's own, the key's lock rows.
#![allow(clippy::unwrap_used)]

use idem_store::sqlx::{self, MySql};
use idem_store::{Backend, KeyLock, KeyRef, KeyTable, NewRow};
use idem_testkit::harness::{HOUR, NOW, TestBackend as _, settings};

/// An execution takes its key's lock in a `READ COMMITTED` transaction and leaves the lock row
/// behind; the sweeper deletes it once no execution took it since its cutoff, and keeps it
/// otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_rows_are_swept_once_no_execution_took_them() {
    let url = MySql::fresh_url().await;
    let pool = idem_store::connect::connect::<MySql>(&url, 2, &settings())
        .await
        .unwrap();
    let table = KeyTable::new(pool.clone());
    table.migrate().await.unwrap();
    let key = KeyRef {
        scope: "global",
        operation: "op:v1",
        key: "k",
    };
    let mut conn = pool.acquire().await.unwrap();
    let namespace = idem_store::connect::namespace::<MySql>(&mut conn)
        .await
        .unwrap();
    let lock = KeyLock {
        namespace: &namespace,
        key,
        expired_by_ms: None,
    };
    let mut tx = MySql::begin(&mut conn, &settings(), Some(lock))
        .await
        .unwrap()
        .free()
        .unwrap();
    // The key's transaction reads what others committed while it waited for the lock.
    let isolation: String = sqlx::query_scalar(
        "SELECT trx_isolation_level FROM information_schema.innodb_trx \
         WHERE trx_mysql_thread_id = CONNECTION_ID()",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(isolation, "READ COMMITTED");
    let row = NewRow {
        field_digests: None,
        key,
        fingerprint: &[1; 32],
        status: 201,
        headers_json: "[]",
        body: b"{}",
        created_ms: NOW - 2 * HOUR,
        completed_ms: NOW - 2 * HOUR,
        expires_ms: NOW - HOUR,
        replace_expired: false,
    };
    assert!(
        idem_store::protocol::insert_completed_and_commit::<MySql>(tx, row, None)
            .await
            .unwrap()
    );
    drop(conn);
    let count = |table: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(count("idempotency_locks").await, 1);
    // A cutoff an hour before the lock was taken (the database's clock): nothing goes.
    let db_now: i64 = sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(3)) DIV 1000 AS SIGNED)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(table.sweep_batch(db_now - HOUR, 10).await.unwrap(), 0);
    assert_eq!(count("idempotency_locks").await, 1);
    assert_eq!(count("idempotency_keys").await, 1);
    // Past both the key's expiry and the lock's last take: both go.
    assert_eq!(table.sweep_batch(NOW, 10).await.unwrap(), 1);
    assert_eq!(count("idempotency_locks").await, 0);
    assert_eq!(count("idempotency_keys").await, 0);
}
