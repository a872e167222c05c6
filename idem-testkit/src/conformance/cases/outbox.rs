//! The outbox: [`enqueue`] in the application's transaction, claims under a lease,
//! outcomes, dead messages, sweeps.

use std::collections::BTreeMap;

use idem_store::sqlx::Pool;
use idem_store::{Backend, Outbox, OutboxMessage, OutboxStatus, StoreError, enqueue};
use serde_json::json;

use crate::conformance::{ConformanceSql, Harness, Must as _, NOW, connect, fresh, settings};

fn message(id: &str) -> OutboxMessage {
    OutboxMessage::new(
        id,
        "order.created",
        json!({ "id": id, "lines": [1, 2.5, "x"] }),
    )
}

/// Enqueues `message` in a transaction of its own, committed.
async fn put<DB: Backend>(pool: &Pool<DB>, message: &OutboxMessage, now_ms: i64) -> bool {
    let mut tx = pool.begin().await.must("begin");
    let inserted = enqueue(&mut tx, message, now_ms).await.must("enqueue");
    tx.commit().await.must("commit");
    inserted
}

/// [`enqueue`] inserts a message due at once, and nothing for a dedup id the table has
/// (committed before, or earlier in the same transaction).
pub async fn outbox_enqueue_dedups<DB: ConformanceSql>(harness: &impl Harness) {
    let outbox = Outbox::new(fresh::<DB>(harness).await.pool().clone());
    let first = message("order-1/created");
    assert!(put(outbox.pool(), &first, NOW).await);
    // The same dedup id, another payload: not enqueued, in a transaction that commits.
    let mut second = message("order-1/created");
    second.payload = json!({ "other": true });
    assert!(!put(outbox.pool(), &second, NOW + 5).await);
    // Twice in one transaction.
    let mut tx = outbox.pool().begin().await.must("begin");
    assert!(
        enqueue(&mut tx, &message("order-2/created"), NOW)
            .await
            .must("the outbox")
    );
    assert!(
        !enqueue(&mut tx, &message("order-2/created"), NOW)
            .await
            .must("the outbox")
    );
    tx.commit().await.must("commit");

    let row = outbox
        .get("order-1/created")
        .await
        .must("get")
        .must("the message");
    assert_eq!(row.payload, first.payload);
    assert_eq!(row.topic, "order.created");
    assert_eq!(row.status, OutboxStatus::Pending);
    assert_eq!(row.attempts, 0);
    assert_eq!(row.created_at_ms, NOW);
    assert_eq!(row.next_attempt_at_ms, NOW);
    assert_eq!(row.locked_until_ms, None);
    assert_eq!(row.last_error, None);
    assert_eq!(row.delivered_at_ms, None);
    let counts = outbox.counts().await.must("counts");
    assert_eq!((counts.pending, counts.total()), (2, 2));
    assert_eq!(counts.oldest_pending_ms, Some(NOW));
    assert!(outbox.get("order-3/created").await.must("get").is_none());
}

/// A message enqueued in a transaction that rolls back (or is dropped) is not there; its
/// dedup id stays free.
pub async fn outbox_rolled_back_transaction_leaves_no_message<DB: ConformanceSql>(
    harness: &impl Harness,
) {
    let outbox = Outbox::new(fresh::<DB>(harness).await.pool().clone());
    let mut tx = outbox.pool().begin().await.must("begin");
    assert!(enqueue(&mut tx, &message("m-1"), NOW).await.must("enqueue"));
    tx.rollback().await.must("rollback");
    // Dropped without commit: rolled back too.
    {
        let mut tx = outbox.pool().begin().await.must("begin");
        assert!(enqueue(&mut tx, &message("m-2"), NOW).await.must("enqueue"));
    }
    assert!(outbox.get("m-1").await.must("get").is_none());
    assert!(outbox.get("m-2").await.must("get").is_none());
    assert!(outbox.claim(NOW, 10, 1_000).await.must("claim").is_empty());
    assert_eq!(outbox.counts().await.must("counts").total(), 0);
    // The id is free: a later transaction enqueues it.
    assert!(put(outbox.pool(), &message("m-1"), NOW).await);
}

/// [`Outbox::claim`] takes due messages in id order under a lease; leased messages are not
/// claimed again until the lease ends; an outcome is recorded once.
pub async fn outbox_claims_are_leased<DB: ConformanceSql>(harness: &impl Harness) {
    let outbox = Outbox::new(fresh::<DB>(harness).await.pool().clone());
    for i in 0..5 {
        assert!(put(outbox.pool(), &message(&format!("m-{i}")), NOW).await);
    }
    // Not due before it was enqueued.
    assert!(
        outbox
            .claim(NOW - 1, 10, 1_000)
            .await
            .must("claim")
            .is_empty()
    );

    let first = outbox.claim(NOW, 3, 1_000).await.must("claim");
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
    let row = outbox.get("m-0").await.must("get").must("the message");
    assert_eq!(row.locked_until_ms, Some(NOW + 1_000));
    assert_eq!(row.status, OutboxStatus::Pending);

    // The claimed rows are leased: the next claim gets the others only.
    let second = outbox.claim(NOW, 10, 1_000).await.must("claim");
    let ids: Vec<&str> = second.iter().map(|m| m.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-3", "m-4"]);
    assert!(
        outbox
            .claim(NOW + 999, 10, 1_000)
            .await
            .must("claim")
            .is_empty()
    );

    // One is delivered; the lease of the others ends and they are claimed again.
    assert!(
        outbox
            .mark_delivered(first[0].id, NOW + 10)
            .await
            .must("mark_delivered")
    );
    let again = outbox.claim(NOW + 1_000, 10, 500).await.must("claim");
    let ids: Vec<&str> = again.iter().map(|m| m.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-1", "m-2", "m-3", "m-4"]);
    assert!(again.iter().all(|m| m.locked_until_ms == NOW + 1_500));

    let delivered = outbox.get("m-0").await.must("get").must("the message");
    assert_eq!(delivered.status, OutboxStatus::Delivered);
    assert_eq!(delivered.delivered_at_ms, Some(NOW + 10));
    assert_eq!(delivered.locked_until_ms, None);
    // Recorded once: a late second outcome changes nothing.
    assert!(
        !outbox
            .mark_delivered(first[0].id, NOW + 20)
            .await
            .must("mark_delivered")
    );
    assert!(
        !outbox
            .mark_failed(first[0].id, NOW + 20, "late", NOW + 30, false)
            .await
            .must("mark_failed")
    );
    assert_eq!(
        outbox
            .get("m-0")
            .await
            .must("get")
            .must("the message")
            .delivered_at_ms,
        Some(NOW + 10)
    );
}

/// A failed delivery is due again later; a message given up on is dead until
/// [`Outbox::retry_dead`] puts it back; delivered messages are swept once old enough.
pub async fn outbox_failures_back_off_then_die<DB: ConformanceSql>(harness: &impl Harness) {
    let outbox = Outbox::new(fresh::<DB>(harness).await.pool().clone());
    assert!(put(outbox.pool(), &message("m-1"), NOW).await);
    let claimed = outbox.claim(NOW, 10, 60_000).await.must("claim");
    assert_eq!(claimed.len(), 1);
    let id = claimed[0].id;

    // A failure: due again later, the lease gone.
    assert!(
        outbox
            .mark_failed(id, NOW + 10, "503 Service Unavailable", NOW + 5_000, false)
            .await
            .must("mark_failed")
    );
    let row = outbox.get("m-1").await.must("get").must("the message");
    assert_eq!(row.status, OutboxStatus::Pending);
    assert_eq!(row.attempts, 1);
    assert_eq!(row.last_error.as_deref(), Some("503 Service Unavailable"));
    assert_eq!(row.next_attempt_at_ms, NOW + 5_000);
    assert_eq!(row.locked_until_ms, None);
    assert!(
        outbox
            .claim(NOW + 4_999, 10, 60_000)
            .await
            .must("claim")
            .is_empty()
    );
    let claimed = outbox.claim(NOW + 5_000, 10, 60_000).await.must("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].attempts, 1);

    // Given up on: dead, with when.
    assert!(
        outbox
            .mark_failed(id, NOW + 5_100, "410 Gone", NOW + 99_000, true)
            .await
            .must("mark_failed")
    );
    let row = outbox.get("m-1").await.must("get").must("the message");
    assert_eq!(row.status, OutboxStatus::Dead);
    assert_eq!(row.attempts, 2);
    assert_eq!(row.last_error.as_deref(), Some("410 Gone"));
    assert_eq!(row.next_attempt_at_ms, NOW + 5_100);
    assert!(
        outbox
            .claim(NOW + 1_000_000, 10, 60_000)
            .await
            .must("claim")
            .is_empty()
    );
    assert!(
        !outbox
            .mark_delivered(id, NOW + 5_200)
            .await
            .must("mark_delivered")
    );
    let dead = outbox.list(Some(OutboxStatus::Dead), 10).await.must("list");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dedup_id, "m-1");
    assert!(
        outbox
            .list(Some(OutboxStatus::Pending), 10)
            .await
            .must("list")
            .is_empty()
    );
    assert_eq!(outbox.counts().await.must("counts").dead, 1);
    assert_eq!(outbox.counts().await.must("counts").oldest_pending_ms, None);

    // An operator puts it back: pending, due now, a full set of attempts again.
    assert!(
        !outbox
            .retry_dead("nope", NOW + 6_000)
            .await
            .must("retry_dead")
    );
    assert!(
        outbox
            .retry_dead("m-1", NOW + 6_000)
            .await
            .must("retry_dead")
    );
    let row = outbox.get("m-1").await.must("get").must("the message");
    assert_eq!(row.status, OutboxStatus::Pending);
    assert_eq!(row.attempts, 0);
    assert_eq!(row.next_attempt_at_ms, NOW + 6_000);
    assert_eq!(row.last_error.as_deref(), Some("410 Gone"));
    let claimed = outbox.claim(NOW + 6_000, 10, 60_000).await.must("claim");
    assert_eq!(claimed.len(), 1);
    assert!(
        outbox
            .mark_delivered(id, NOW + 6_100)
            .await
            .must("mark_delivered")
    );
    assert!(
        !outbox
            .retry_dead("m-1", NOW + 7_000)
            .await
            .must("retry_dead")
    );

    // Delivered rows are swept once old enough.
    assert_eq!(
        outbox
            .sweep_delivered(NOW + 6_099, 10)
            .await
            .must("sweep_delivered"),
        0
    );
    assert_eq!(
        outbox
            .sweep_delivered(NOW + 6_100, 10)
            .await
            .must("sweep_delivered"),
        1
    );
    assert_eq!(outbox.counts().await.must("counts").total(), 0);
}

/// [`Outbox::list`] by status in id order, limited; [`Outbox::counts`] by status with the
/// oldest pending message.
pub async fn outbox_listing_and_counts<DB: ConformanceSql>(harness: &impl Harness) {
    let outbox = Outbox::new(fresh::<DB>(harness).await.pool().clone());
    for i in 0..6 {
        assert!(put(outbox.pool(), &message(&format!("m-{i}")), NOW + i).await);
    }
    let claimed = outbox.claim(NOW + 10, 3, 1_000).await.must("claim");
    assert!(
        outbox
            .mark_delivered(claimed[0].id, NOW + 11)
            .await
            .must("mark_delivered")
    );
    assert!(
        outbox
            .mark_failed(claimed[1].id, NOW + 11, "boom", NOW + 11, true)
            .await
            .must("mark_failed")
    );
    let all = outbox.list(None, 100).await.must("list");
    let ids: Vec<&str> = all.iter().map(|r| r.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-0", "m-1", "m-2", "m-3", "m-4", "m-5"]);
    assert_eq!(outbox.list(None, 2).await.must("list").len(), 2);
    let pending = outbox
        .list(Some(OutboxStatus::Pending), 100)
        .await
        .must("list");
    let ids: Vec<&str> = pending.iter().map(|r| r.dedup_id.as_str()).collect();
    assert_eq!(ids, ["m-2", "m-3", "m-4", "m-5"]);
    let counts = outbox.counts().await.must("counts");
    assert_eq!((counts.pending, counts.delivered, counts.dead), (4, 1, 1));
    assert_eq!(counts.oldest_pending_ms, Some(NOW + 2));
}

/// A payload edited by hand into something that is not JSON cannot be delivered: the claim
/// marks it dead instead of failing on it forever.
pub async fn outbox_unreadable_payloads_die<DB: ConformanceSql>(harness: &impl Harness) {
    let outbox = Outbox::new(fresh::<DB>(harness).await.pool().clone());
    assert!(put(outbox.pool(), &message("bad"), NOW).await);
    assert!(put(outbox.pool(), &message("good"), NOW).await);
    DB::corrupt_payload(outbox.pool(), "bad")
        .await
        .must("corrupting the payload");
    let claimed = outbox.claim(NOW, 10, 1_000).await.must("claim");
    let ids: Vec<&str> = claimed.iter().map(|m| m.dedup_id.as_str()).collect();
    assert_eq!(ids, ["good"]);
    match outbox.get("bad").await {
        Err(StoreError::Corrupt(reason)) => assert!(reason.contains("not JSON"), "{reason}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let counts = outbox.counts().await.must("counts");
    assert_eq!((counts.dead, counts.pending), (1, 1));
}

/// Four dispatchers, each with its own pool (four processes), claim 200 messages in small
/// batches: every message is claimed, and by exactly one of them.
pub async fn outbox_concurrent_claimers_never_share_a_message<DB: ConformanceSql>(
    harness: &impl Harness,
) {
    let url = harness.fresh_database().await;
    let pool = connect::<DB>(&url, &settings()).await;
    idem_store::migrate(&pool).await.must("migrate");
    let outbox = Outbox::new(pool);
    let mut tx = outbox.pool().begin().await.must("begin");
    for i in 0..200 {
        let message = message(&format!("m-{i:03}"));
        assert!(enqueue(&mut tx, &message, NOW).await.must("enqueue"));
    }
    tx.commit().await.must("commit");

    let mut dispatchers = Vec::new();
    for _ in 0..4 {
        dispatchers.push(Outbox::new(connect::<DB>(&url, &settings()).await));
    }
    let dispatch = |outbox: Outbox<DB>| async move {
        let mut got = Vec::new();
        loop {
            let batch = outbox.claim(NOW, 7, 60_000).await.must("claim");
            if batch.is_empty() {
                return got;
            }
            for message in batch {
                let recorded = outbox
                    .mark_delivered(message.id, NOW)
                    .await
                    .must("mark_delivered");
                assert!(recorded, "{} delivered by someone else", message.dedup_id);
                got.push(message.dedup_id);
            }
        }
    };
    let mut dispatchers = dispatchers.into_iter();
    let mut next = || dispatch(dispatchers.next().must("a dispatcher"));
    let (a, b, c, d) = tokio::join!(next(), next(), next(), next());
    let mut per_id: BTreeMap<String, usize> = BTreeMap::new();
    for id in [a, b, c, d].into_iter().flatten() {
        *per_id.entry(id).or_default() += 1;
    }
    assert_eq!(per_id.len(), 200, "messages claimed");
    let twice: Vec<_> = per_id.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    let counts = outbox.counts().await.must("counts");
    assert_eq!(counts.delivered, 200, "delivered messages");
}
