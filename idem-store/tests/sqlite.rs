//! The key table on SQLite (a new file per test under the temporary directory).
#![allow(clippy::unwrap_used)]

mod common;

use idem_store::sqlx::{self, Sqlite};
use idem_store::{KeyFilter, KeyRef, KeyStatus};
use idem_testkit::conformance::put;
use idem_testkit::harness::{HOUR, NOW};

/// An `expires_at` an operator wrote by hand as a number is read as Unix seconds, by the
/// protocol, the tools and the filters alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_written_numeric_expiry() {
    let (_, table) = common::fresh::<Sqlite>().await;
    let k = KeyRef {
        scope: "global",
        operation: "op:v1",
        key: "k",
    };
    assert!(put(table.pool(), k, NOW - HOUR, NOW + HOUR, b"").await);
    let seconds = (NOW - HOUR) / 1000;
    sqlx::query("UPDATE idempotency_keys SET expires_at = ?1")
        .bind(seconds.to_string())
        .execute(table.pool())
        .await
        .unwrap();
    let row = table.get(k, NOW).await.unwrap().unwrap();
    assert_eq!(row.expires_at_ms, NOW - HOUR);
    assert_eq!(row.status, KeyStatus::Expired);
    let mut conn = table.pool().acquire().await.unwrap();
    let stored = idem_store::protocol::lookup::<Sqlite>(&mut conn, k, None)
        .await
        .unwrap()
        .unwrap();
    drop(conn);
    assert_eq!(stored.expires_at_ms, NOW - HOUR);
    let expired = table
        .list(&KeyFilter::new().status(KeyStatus::Expired), NOW)
        .await
        .unwrap();
    assert_eq!(expired.keys.len(), 1);
    assert_eq!(table.counts(NOW).await.unwrap().by_status.expired, 1);
    // Expiring it keeps the earlier expiry.
    let (before, after) = table.expire(k, NOW).await.unwrap().unwrap();
    assert_eq!(before, after);
}
