//! The outbox on real databases: every case runs on PostgreSQL (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`; each test in a schema `idem_test_<uuid>`) and
//! on SQLite (a new file per test under the temporary directory).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::future::Future;

use common::{NOW, settings, unique};
use idem_store::sqlx::{self, Pool, Postgres, Sqlite};
use idem_store::{Backend, Outbox, OutboxMessage, OutboxStatus, StoreError, enqueue};
use serde_json::json;

/// A database of one backend, fresh for one test, and what the tests do on it in SQL.
trait OutboxDb: Backend {
    /// A URL to a new, empty database (PostgreSQL: a new schema; SQLite: a new file).
    fn fresh_url() -> impl Future<Output = String> + Send;
    /// The versions in `idem_schema_migrations`.
    fn history(pool: &Pool<Self>) -> impl Future<Output = Vec<i64>> + Send;
    /// Sets a message's payload to text that is not JSON.
    fn corrupt_payload(pool: &Pool<Self>, dedup_id: &str) -> impl Future<Output = ()> + Send;
}

/// The SQL both backends share.
macro_rules! outbox_db_sql {
    () => {
        async fn history(pool: &Pool<Self>) -> Vec<i64> {
            sqlx::query_scalar("SELECT version FROM idem_schema_migrations ORDER BY version")
                .fetch_all(pool)
                .await
                .unwrap()
        }
        async fn corrupt_payload(pool: &Pool<Self>, dedup_id: &str) {
            sqlx::query("UPDATE idempotency_outbox SET payload = 'not json' WHERE dedup_id = $1")
                .bind(dedup_id)
                .execute(pool)
                .await
                .unwrap();
        }
    };
}

impl OutboxDb for Postgres {
    async fn fresh_url() -> String {
        let url = common::postgres_url();
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
        format!("{url}{separator}options=-c%20search_path%3D{schema}&application_name={schema}")
    }

    outbox_db_sql!();
}

impl OutboxDb for Sqlite {
    async fn fresh_url() -> String {
        format!(
            "sqlite://{}",
            common::temp_file(&unique("idem_test")).display()
        )
    }

    outbox_db_sql!();
}

async fn fresh<DB: OutboxDb>() -> (String, Outbox<DB>) {
    let url = DB::fresh_url().await;
    let pool = DB::connect(&url, 4, &settings()).await.unwrap();
    idem_store::migrate(&pool).await.unwrap();
    (url, Outbox::new(pool))
}

fn message(id: &str) -> OutboxMessage {
    OutboxMessage::new(
        id,
        "order.created",
        json!({ "id": id, "lines": [1, 2.5, "x"] }),
    )
}

/// Enqueues `message` in a transaction of its own, committed.
async fn put<DB: OutboxDb>(pool: &Pool<DB>, message: &OutboxMessage, now_ms: i64) -> bool {
    let mut tx = pool.begin().await.unwrap();
    let inserted = enqueue(&mut tx, message, now_ms).await.unwrap();
    tx.commit().await.unwrap();
    inserted
}

// The cases.

async fn migrate_twice_is_a_noop<DB: OutboxDb>() {
    let (_, outbox) = fresh::<DB>().await;
    assert!(put(outbox.pool(), &message("m-1"), NOW).await);
    idem_store::migrate(outbox.pool()).await.unwrap();
    idem_store::migrate(outbox.pool()).await.unwrap();
    let versions = DB::history(outbox.pool()).await;
    assert_eq!(
        versions,
        DB::migrations()
            .iter()
            .map(|m| m.version)
            .collect::<Vec<_>>()
    );
    assert!(versions.contains(&3), "{versions:?}");
    assert_eq!(outbox.counts().await.unwrap().pending, 1);
}

async fn enqueue_dedups<DB: OutboxDb>() {
    let (_, outbox) = fresh::<DB>().await;
    let first = message("order-1/created");
    assert!(put(outbox.pool(), &first, NOW).await);
    // The same dedup id, another payload: not enqueued, in a transaction that commits.
    let mut second = message("order-1/created");
    second.payload = json!({ "other": true });
    assert!(!put(outbox.pool(), &second, NOW + 5).await);
    // Twice in one transaction.
    let mut tx = outbox.pool().begin().await.unwrap();
    assert!(
        enqueue(&mut tx, &message("order-2/created"), NOW)
            .await
            .unwrap()
    );
    assert!(
        !enqueue(&mut tx, &message("order-2/created"), NOW)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();

    let row = outbox.get("order-1/created").await.unwrap().unwrap();
    assert_eq!(row.payload, first.payload);
    assert_eq!(row.topic, "order.created");
    assert_eq!(row.status, OutboxStatus::Pending);
    assert_eq!(row.attempts, 0);
    assert_eq!(row.created_at_ms, NOW);
    assert_eq!(row.next_attempt_at_ms, NOW);
    assert_eq!(row.locked_until_ms, None);
    assert_eq!(row.last_error, None);
    assert_eq!(row.delivered_at_ms, None);
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.total()), (2, 2));
    assert_eq!(counts.oldest_pending_ms, Some(NOW));
    assert!(outbox.get("order-3/created").await.unwrap().is_none());
}

async fn rolled_back_transaction_leaves_no_message<DB: OutboxDb>() {
    let (_, outbox) = fresh::<DB>().await;
    let mut tx = outbox.pool().begin().await.unwrap();
    assert!(enqueue(&mut tx, &message("m-1"), NOW).await.unwrap());
    tx.rollback().await.unwrap();
    // Dropped without commit: rolled back too.
    {
        let mut tx = outbox.pool().begin().await.unwrap();
        assert!(enqueue(&mut tx, &message("m-2"), NOW).await.unwrap());
    }
    assert!(outbox.get("m-1").await.unwrap().is_none());
    assert!(outbox.get("m-2").await.unwrap().is_none());
    assert!(outbox.claim(NOW, 10, 1_000).await.unwrap().is_empty());
    assert_eq!(outbox.counts().await.unwrap().total(), 0);
    // The id is free: a later transaction enqueues it.
    assert!(put(outbox.pool(), &message("m-1"), NOW).await);
}

async fn claims_are_leased<DB: OutboxDb>() {
    let (_, outbox) = fresh::<DB>().await;
    for i in 0..5 {
        assert!(put(outbox.pool(), &message(&format!("m-{i}")), NOW).await);
    }
    // Not due before it was enqueued.
    assert!(outbox.claim(NOW - 1, 10, 1_000).await.unwrap().is_empty());

    let first = outbox.claim(NOW, 3, 1_000).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|m| m.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-0", "m-1", "m-2"]);
    assert!(first.windows(2).all(|w| w[0].id < w[1].id));
    for claimed in &first {
        assert_eq!(claimed.locked_until_ms, NOW + 1_000);
        assert_eq!(claimed.attempts, 0);
        assert_eq!(claimed.created_at_ms, NOW);
        assert_eq!(claimed.topic, "order.created");
        assert_eq!(claimed.payload["id"], json!(claimed.dedup_id));
    }
    let row = outbox.get("m-0").await.unwrap().unwrap();
    assert_eq!(row.locked_until_ms, Some(NOW + 1_000));
    assert_eq!(row.status, OutboxStatus::Pending);

    // The claimed rows are leased: the next claim gets the others only.
    let second = outbox.claim(NOW, 10, 1_000).await.unwrap();
    let ids: Vec<&str> = second.iter().map(|m| m.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-3", "m-4"]);
    assert!(outbox.claim(NOW + 999, 10, 1_000).await.unwrap().is_empty());

    // One is delivered; the lease of the others ends and they are claimed again.
    assert!(outbox.mark_delivered(first[0].id, NOW + 10).await.unwrap());
    let again = outbox.claim(NOW + 1_000, 10, 500).await.unwrap();
    let ids: Vec<&str> = again.iter().map(|m| m.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-1", "m-2", "m-3", "m-4"]);
    assert!(again.iter().all(|m| m.locked_until_ms == NOW + 1_500));

    let delivered = outbox.get("m-0").await.unwrap().unwrap();
    assert_eq!(delivered.status, OutboxStatus::Delivered);
    assert_eq!(delivered.delivered_at_ms, Some(NOW + 10));
    assert_eq!(delivered.locked_until_ms, None);
    // Recorded once: a late second outcome changes nothing.
    assert!(!outbox.mark_delivered(first[0].id, NOW + 20).await.unwrap());
    assert!(
        !outbox
            .mark_failed(first[0].id, NOW + 20, "late", NOW + 30, false)
            .await
            .unwrap()
    );
    assert_eq!(
        outbox.get("m-0").await.unwrap().unwrap().delivered_at_ms,
        Some(NOW + 10)
    );
}

async fn failures_back_off_then_die<DB: OutboxDb>() {
    let (_, outbox) = fresh::<DB>().await;
    assert!(put(outbox.pool(), &message("m-1"), NOW).await);
    let claimed = outbox.claim(NOW, 10, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let id = claimed[0].id;

    // A failure: due again later, the lease gone.
    assert!(
        outbox
            .mark_failed(id, NOW + 10, "503 Service Unavailable", NOW + 5_000, false)
            .await
            .unwrap()
    );
    let row = outbox.get("m-1").await.unwrap().unwrap();
    assert_eq!(row.status, OutboxStatus::Pending);
    assert_eq!(row.attempts, 1);
    assert_eq!(row.last_error.as_deref(), Some("503 Service Unavailable"));
    assert_eq!(row.next_attempt_at_ms, NOW + 5_000);
    assert_eq!(row.locked_until_ms, None);
    assert!(
        outbox
            .claim(NOW + 4_999, 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
    let claimed = outbox.claim(NOW + 5_000, 10, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].attempts, 1);

    // Given up on: dead, with when.
    assert!(
        outbox
            .mark_failed(id, NOW + 5_100, "410 Gone", NOW + 99_000, true)
            .await
            .unwrap()
    );
    let row = outbox.get("m-1").await.unwrap().unwrap();
    assert_eq!(row.status, OutboxStatus::Dead);
    assert_eq!(row.attempts, 2);
    assert_eq!(row.last_error.as_deref(), Some("410 Gone"));
    assert_eq!(row.next_attempt_at_ms, NOW + 5_100);
    assert!(
        outbox
            .claim(NOW + 1_000_000, 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!outbox.mark_delivered(id, NOW + 5_200).await.unwrap());
    let dead = outbox.list(Some(OutboxStatus::Dead), 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dedup_id, "m-1");
    assert!(
        outbox
            .list(Some(OutboxStatus::Pending), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(outbox.counts().await.unwrap().dead, 1);
    assert_eq!(outbox.counts().await.unwrap().oldest_pending_ms, None);

    // An operator puts it back: pending, due now, a full set of attempts again.
    assert!(!outbox.retry_dead("nope", NOW + 6_000).await.unwrap());
    assert!(outbox.retry_dead("m-1", NOW + 6_000).await.unwrap());
    let row = outbox.get("m-1").await.unwrap().unwrap();
    assert_eq!(row.status, OutboxStatus::Pending);
    assert_eq!(row.attempts, 0);
    assert_eq!(row.next_attempt_at_ms, NOW + 6_000);
    assert_eq!(row.last_error.as_deref(), Some("410 Gone"));
    let claimed = outbox.claim(NOW + 6_000, 10, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(outbox.mark_delivered(id, NOW + 6_100).await.unwrap());
    assert!(!outbox.retry_dead("m-1", NOW + 7_000).await.unwrap());

    // Delivered rows are swept once old enough.
    assert_eq!(outbox.sweep_delivered(NOW + 6_099, 10).await.unwrap(), 0);
    assert_eq!(outbox.sweep_delivered(NOW + 6_100, 10).await.unwrap(), 1);
    assert_eq!(outbox.counts().await.unwrap().total(), 0);
}

async fn listing_and_counts<DB: OutboxDb>() {
    let (_, outbox) = fresh::<DB>().await;
    for i in 0..6 {
        assert!(put(outbox.pool(), &message(&format!("m-{i}")), NOW + i).await);
    }
    let claimed = outbox.claim(NOW + 10, 3, 1_000).await.unwrap();
    assert!(
        outbox
            .mark_delivered(claimed[0].id, NOW + 11)
            .await
            .unwrap()
    );
    assert!(
        outbox
            .mark_failed(claimed[1].id, NOW + 11, "boom", NOW + 11, true)
            .await
            .unwrap()
    );
    let all = outbox.list(None, 100).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|r| r.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-0", "m-1", "m-2", "m-3", "m-4", "m-5"]);
    assert_eq!(outbox.list(None, 2).await.unwrap().len(), 2);
    let pending = outbox.list(Some(OutboxStatus::Pending), 100).await.unwrap();
    let ids: Vec<&str> = pending.iter().map(|r| r.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-2", "m-3", "m-4", "m-5"]);
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.delivered, counts.dead), (4, 1, 1));
    assert_eq!(counts.oldest_pending_ms, Some(NOW + 2));
}

/// A payload edited by hand into something that is not JSON cannot be delivered: the claim
/// marks it dead instead of failing on it forever.
async fn unreadable_payloads_die<DB: OutboxDb>() {
    let (_, outbox) = fresh::<DB>().await;
    assert!(put(outbox.pool(), &message("bad"), NOW).await);
    assert!(put(outbox.pool(), &message("good"), NOW).await);
    DB::corrupt_payload(outbox.pool(), "bad").await;
    let claimed = outbox.claim(NOW, 10, 1_000).await.unwrap();
    let ids: Vec<&str> = claimed.iter().map(|m| m.dedup_id.as_str()).collect();
    assert_eq!(ids, ["good"]);
    match outbox.get("bad").await {
        Err(StoreError::Corrupt(reason)) => assert!(reason.contains("not JSON"), "{reason}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.dead, counts.pending), (1, 1));
}

/// Four claimers, each on its own pool (four processes), take 200 messages in small
/// batches: every message is claimed by exactly one of them.
async fn concurrent_claimers_never_share_a_row<DB: OutboxDb>() {
    let (url, outbox) = fresh::<DB>().await;
    let mut tx = outbox.pool().begin().await.unwrap();
    for i in 0..200 {
        let message = message(&format!("m-{i:03}"));
        assert!(enqueue(&mut tx, &message, NOW).await.unwrap());
    }
    tx.commit().await.unwrap();

    let mut claimers = Vec::new();
    for _ in 0..4 {
        let pool = DB::connect(&url, 2, &settings()).await.unwrap();
        let outbox = Outbox::new(pool);
        claimers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = outbox.claim(NOW, 7, 60_000).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                for message in batch {
                    tokio::task::yield_now().await;
                    assert!(outbox.mark_delivered(message.id, NOW).await.unwrap());
                    got.push(message.dedup_id);
                }
            }
        }));
    }
    let mut per_id: BTreeMap<String, usize> = BTreeMap::new();
    for claimer in claimers {
        for id in claimer.await.unwrap() {
            *per_id.entry(id).or_default() += 1;
        }
    }
    assert_eq!(per_id.len(), 200);
    let twice: Vec<_> = per_id.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    assert_eq!(outbox.counts().await.unwrap().delivered, 200);
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<idem_store::sqlx::Postgres>().await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name::<idem_store::sqlx::Sqlite>().await;
                }
            )*
        }
    };
}

on_both_backends!(
    migrate_twice_is_a_noop,
    enqueue_dedups,
    rolled_back_transaction_leaves_no_message,
    claims_are_leased,
    failures_back_off_then_die,
    listing_and_counts,
    unreadable_payloads_die,
    concurrent_claimers_never_share_a_row,
);
