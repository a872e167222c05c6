//! The outbox: [`enqueue`] in the application's transaction, claims under a lease,
//! outcomes, dead messages, operators' retries and their audit trail, sweeps.

use std::collections::BTreeMap;

use idem_store::sqlx::Pool;
use idem_store::{
    Actor, AuditFilter, Backend, KeyTable, Outbox, OutboxMessage, OutboxRow, OutboxStatus,
    StoreError, enqueue,
};
use serde_json::{Value, json};

use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{Must as _, connect, fresh, settings};
use crate::harness::NOW;

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
    let inserted = enqueue(&mut tx, message, now_ms, None)
        .await
        .must("enqueue");
    tx.commit().await.must("commit");
    inserted
}

/// [`enqueue`] inserts a message due at once, and nothing for a dedup id the table has
/// (committed before, or earlier in the same transaction).
pub async fn outbox_enqueue_dedups<DB: ConformanceSql>() {
    let outbox = Outbox::new(fresh::<DB>().await.pool().clone());
    let first = message("order-1/created");
    assert!(put(outbox.pool(), &first, NOW).await);
    // The same dedup id, another payload: not enqueued, in a transaction that commits.
    let mut second = message("order-1/created");
    second.payload = json!({ "other": true });
    assert!(!put(outbox.pool(), &second, NOW + 5).await);
    // Twice in one transaction.
    let mut tx = outbox.pool().begin().await.must("begin");
    assert!(
        enqueue(&mut tx, &message("order-2/created"), NOW, None)
            .await
            .must("the outbox")
    );
    assert!(
        !enqueue(&mut tx, &message("order-2/created"), NOW, None)
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
    let counts = outbox.counts(NOW).await.must("counts");
    assert_eq!(
        (counts.pending, counts.in_flight, counts.total()),
        (2, 0, 2)
    );
    assert_eq!(counts.oldest_pending_ms, Some(NOW));
    assert!(outbox.get("order-3/created").await.must("get").is_none());
}

/// A message enqueued in a transaction that rolls back (or is dropped) is not there; its
/// dedup id stays free.
pub async fn outbox_rolled_back_transaction_leaves_no_message<DB: ConformanceSql>() {
    let outbox = Outbox::new(fresh::<DB>().await.pool().clone());
    let mut tx = outbox.pool().begin().await.must("begin");
    assert!(
        enqueue(&mut tx, &message("m-1"), NOW, None)
            .await
            .must("enqueue")
    );
    tx.rollback().await.must("rollback");
    // Dropped without commit: rolled back too.
    {
        let mut tx = outbox.pool().begin().await.must("begin");
        assert!(
            enqueue(&mut tx, &message("m-2"), NOW, None)
                .await
                .must("enqueue")
        );
    }
    assert!(outbox.get("m-1").await.must("get").is_none());
    assert!(outbox.get("m-2").await.must("get").is_none());
    assert!(outbox.claim(NOW, 10, 1_000).await.must("claim").is_empty());
    assert_eq!(outbox.counts(NOW).await.must("counts").total(), 0);
    // The id is free: a later transaction enqueues it.
    assert!(put(outbox.pool(), &message("m-1"), NOW).await);
}

/// [`Outbox::claim`] takes due messages in id order under a lease; leased messages are not
/// claimed again until the lease ends; an outcome is recorded once.
pub async fn outbox_claims_are_leased<DB: ConformanceSql>() {
    let outbox = Outbox::new(fresh::<DB>().await.pool().clone());
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
/// [`Outbox::retry`] puts it back; delivered messages are swept once old enough.
pub async fn outbox_failures_back_off_then_die<DB: ConformanceSql>() {
    let outbox = Outbox::new(fresh::<DB>().await.pool().clone());
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
    assert_eq!(outbox.counts(NOW).await.must("counts").dead, 1);
    assert_eq!(
        outbox.counts(NOW).await.must("counts").oldest_pending_ms,
        None
    );

    // An operator puts it back: pending, due now, a full set of attempts again.
    let by = Actor::new("alice");
    assert!(matches!(
        outbox.retry(id + 1_000, NOW + 6_000, &by).await,
        Err(StoreError::NotApplicable(_))
    ));
    let retried = outbox.retry(id, NOW + 6_000, &by).await.must("retry");
    let row = outbox.get("m-1").await.must("get").must("the message");
    assert_eq!(retried, row);
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
    assert!(matches!(
        outbox.retry(id, NOW + 7_000, &by).await,
        Err(StoreError::NotApplicable(_))
    ));

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
    assert_eq!(outbox.counts(NOW).await.must("counts").total(), 0);
}

/// [`Outbox::list`] by status in id order, limited; [`Outbox::counts`] by status with the
/// oldest pending message.
pub async fn outbox_listing_and_counts<DB: ConformanceSql>() {
    let outbox = Outbox::new(fresh::<DB>().await.pool().clone());
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
    // m-2 is still leased (in flight) until NOW + 1_010, and pending all the same.
    let counts = outbox.counts(NOW + 10).await.must("counts");
    assert_eq!((counts.pending, counts.delivered, counts.dead), (4, 1, 1));
    assert_eq!(counts.in_flight, 1);
    assert_eq!(counts.oldest_pending_ms, Some(NOW + 2));
    let counts = outbox.counts(NOW + 1_009).await.must("counts");
    assert_eq!((counts.pending, counts.in_flight), (4, 1));
    let counts = outbox.counts(NOW + 1_010).await.must("counts");
    assert_eq!((counts.pending, counts.in_flight), (4, 0));

    // One message by its row id.
    let found = outbox.find(all[2].id).await.must("find").must("m-2");
    assert_eq!(found, all[2]);
    assert_eq!(found.dedup_id, "m-2");
    assert!(found.in_flight(NOW + 10) && !found.in_flight(NOW + 1_010));
    let last = all.iter().map(|r| r.id).max().must("an id");
    assert!(outbox.find(last + 1).await.must("find").is_none());
    assert!(outbox.find(-1).await.must("find").is_none());
}

/// A payload edited by hand into something that is not JSON cannot be delivered: the claim
/// marks it dead instead of failing on it forever.
pub async fn outbox_unreadable_payloads_die<DB: ConformanceSql>() {
    let outbox = Outbox::new(fresh::<DB>().await.pool().clone());
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
    let counts = outbox.counts(NOW).await.must("counts");
    assert_eq!((counts.dead, counts.pending), (1, 1));
    // Retrying it would only see it die again: refused as unreadable, changing nothing.
    let bad = outbox.list(Some(OutboxStatus::Dead), 10).await;
    assert!(matches!(bad, Err(StoreError::Corrupt(_))), "{bad:?}");
    let by = Actor::new("alice");
    let id = claimed[0].id - 1;
    assert!(matches!(
        outbox.retry(id, NOW + 1, &by).await,
        Err(StoreError::Corrupt(_))
    ));
    assert_eq!(outbox.retry_all(NOW + 1, &by).await.must("retry_all"), 0);
    assert_eq!(outbox.counts(NOW).await.must("counts").dead, 1);
}

/// Four dispatchers, each with its own pool (four processes), claim 200 messages in small
/// batches: every message is claimed, and by exactly one of them.
pub async fn outbox_concurrent_claimers_never_share_a_message<DB: ConformanceSql>() {
    let url = DB::fresh_url().await;
    let pool = connect::<DB>(&url, &settings()).await;
    idem_store::migrate(&pool).await.must("migrate");
    let outbox = Outbox::new(pool);
    let mut tx = outbox.pool().begin().await.must("begin");
    for i in 0..200 {
        let message = message(&format!("m-{i:03}"));
        assert!(enqueue(&mut tx, &message, NOW, None).await.must("enqueue"));
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
    let counts = outbox.counts(NOW).await.must("counts");
    assert_eq!(counts.delivered, 200, "delivered messages");
}

/// The message `dedup_id`, which must exist.
async fn row_of<DB: Backend>(outbox: &Outbox<DB>, dedup_id: &str) -> OutboxRow {
    outbox.get(dedup_id).await.must("get").must("the message")
}

/// Enqueues `ids` at [`NOW`] and claims them all, leased until `NOW + 1_000`: each then
/// gets the outcome the caller records.
async fn claimed<DB: Backend>(outbox: &Outbox<DB>, ids: &[&str]) -> Vec<i64> {
    for id in ids {
        assert!(put(outbox.pool(), &message(id), NOW).await);
    }
    let claimed = outbox.claim(NOW, 1_000, 1_000).await.must("claim");
    assert_eq!(claimed.len(), ids.len());
    claimed.iter().map(|m| m.id).collect()
}

/// The audit trail's entries on a message, newest first.
async fn audited<DB: Backend>(
    table: &KeyTable<DB>,
    row: &OutboxRow,
) -> Vec<idem_store::AuditEntry> {
    table
        .audit(&AuditFilter::new().key(row.audit_key()))
        .await
        .must("audit")
}

/// [`Outbox::retry`]: a dead message is pending again with its attempts reset, one waiting
/// for its backoff is due now with its attempts kept; a message in flight, delivered, due
/// already or missing is refused; every retry is audited in the same transaction, refusals
/// not at all.
pub async fn outbox_retry_is_audited<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let outbox = Outbox::new(table.pool().clone());
    let ids = claimed(
        &outbox,
        &["dead", "backoff", "in-flight", "delivered", "due"],
    )
    .await;
    let [dead, backoff, in_flight, delivered, due] = ids[..] else {
        panic!("five messages: {ids:?}");
    };
    let fail = |id, next, dead| {
        let outbox = outbox.clone();
        async move {
            assert!(
                outbox
                    .mark_failed(id, NOW + 10, "HTTP 503", next, dead)
                    .await
                    .must("mark_failed")
            );
        }
    };
    fail(dead, NOW + 10, true).await;
    fail(backoff, NOW + 60_000, false).await;
    fail(due, NOW + 20, false).await;
    assert!(
        outbox
            .mark_delivered(delivered, NOW + 10)
            .await
            .must("mark_delivered")
    );
    let now = NOW + 100;
    let by = Actor::new("alice").reason("INC-42: the receiver is back");

    // Refused, changing nothing, auditing nothing.
    let before: Vec<OutboxRow> = outbox.list(None, 10).await.must("list");
    for (id, why) in [
        (in_flight, "being delivered"),
        (delivered, "delivered"),
        (due, "due already"),
        (due + 1_000, "no outbox message"),
    ] {
        match outbox.retry(id, now, &by).await {
            Err(StoreError::NotApplicable(reason)) => {
                assert!(reason.to_string().contains(why), "{id}: {reason}");
            }
            other => panic!("retry of {id}: expected NotApplicable, got {other:?}"),
        }
    }
    assert!(matches!(
        outbox.retry(dead, now, &Actor::new(" ")).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        outbox.retry_all(now, &Actor::new("")).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(outbox.list(None, 10).await.must("list"), before);
    assert!(
        table
            .audit(&AuditFilter::new())
            .await
            .must("audit")
            .is_empty()
    );

    // A dead message: pending, due now, attempts 0, its last error kept.
    let was = row_of(&outbox, "dead").await;
    let after = outbox.retry(dead, now, &by).await.must("retry");
    assert_eq!(after, row_of(&outbox, "dead").await);
    assert_eq!(after.status, OutboxStatus::Pending);
    assert_eq!(after.attempts, 0);
    assert_eq!(after.next_attempt_at_ms, now);
    assert_eq!(after.locked_until_ms, None);
    assert_eq!(after.last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(after.payload, was.payload);
    let entries = audited(&table, &after).await;
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry.at_ms, now);
    assert_eq!(entry.operator, "alice");
    assert_eq!(entry.scope, Outbox::<DB>::AUDIT_SCOPE);
    assert_eq!(entry.scope, "outbox");
    assert_eq!(entry.operation, "order.created");
    assert_eq!(entry.key, "dead");
    assert_eq!(entry.action, Outbox::<DB>::RETRY_ACTION);
    assert_eq!(entry.action, "outbox-retry");
    assert_eq!(
        entry.reason.as_deref(),
        Some("INC-42: the receiver is back")
    );
    assert!(!entry.forced);
    let json_of = |row: &OutboxRow| {
        json!({
            "id": row.id, "dedup_id": row.dedup_id, "topic": row.topic,
            "status": row.status.as_str(), "attempts": row.attempts,
            "next_attempt_at_ms": row.next_attempt_at_ms, "locked_until_ms": row.locked_until_ms,
            "last_error": row.last_error, "created_at_ms": row.created_at_ms,
            "delivered_at_ms": row.delivered_at_ms, "payload": row.payload,
        })
    };
    assert_eq!(entry.before.as_ref(), Some(&json_of(&was)));
    assert_eq!(entry.after.as_ref(), Some(&json_of(&after)));
    assert_eq!(
        entry.before.as_ref().map(|b| &b["status"]),
        Some(&Value::from("dead"))
    );
    // Claimed at once, with a full set of attempts again.
    let claimed = outbox.claim(now, 10, 1_000).await.must("claim");
    let got: Vec<(&str, u32)> = claimed
        .iter()
        .map(|m| (m.dedup_id.as_str(), m.attempts))
        .collect();
    assert_eq!(got, [("dead", 0), ("due", 1)]);

    // A message waiting for its backoff: due now, its attempts kept.
    let after = outbox.retry(backoff, now, &by).await.must("retry");
    assert_eq!(after.status, OutboxStatus::Pending);
    assert_eq!(after.attempts, 1);
    assert_eq!(after.next_attempt_at_ms, now);
    assert_eq!(audited(&table, &after).await.len(), 1);
    // Due now: a second retry is refused.
    assert!(matches!(
        outbox.retry(backoff, now, &by).await,
        Err(StoreError::NotApplicable(_))
    ));
    // The lease of "in-flight" ran out (its dispatcher died): due, not retried either.
    assert!(matches!(
        outbox.retry(in_flight, NOW + 1_000, &by).await,
        Err(StoreError::NotApplicable(_))
    ));
    assert_eq!(
        table
            .audit(&AuditFilter::new().operator("alice"))
            .await
            .must("audit")
            .len(),
        2
    );
}

/// [`Outbox::retry_all`] retries every dead message and every one waiting for its backoff,
/// batch after batch ([`Outbox::RETRY_BATCH`]), each with its audit entry, and leaves the
/// others alone.
pub async fn outbox_retry_all_in_batches<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let outbox = Outbox::new(table.pool().clone());
    let dead_count = usize::try_from(Outbox::<DB>::RETRY_BATCH).must("a batch") + 30;
    let mut names: Vec<String> = (0..dead_count).map(|i| format!("dead-{i:03}")).collect();
    names.extend(["backoff", "in-flight", "delivered", "due"].map(String::from));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ids = claimed(&outbox, &refs).await;
    for &id in &ids[..dead_count] {
        assert!(
            outbox
                .mark_failed(id, NOW + 10, "HTTP 410", NOW + 10, true)
                .await
                .must("mark_failed")
        );
    }
    let [backoff, _in_flight, delivered, due] = ids[dead_count..] else {
        panic!("four more messages: {ids:?}");
    };
    for (id, next) in [(backoff, NOW + 60_000), (due, NOW + 20)] {
        assert!(
            outbox
                .mark_failed(id, NOW + 10, "HTTP 503", next, false)
                .await
                .must("mark_failed")
        );
    }
    assert!(
        outbox
            .mark_delivered(delivered, NOW + 10)
            .await
            .must("mark_delivered")
    );
    let now = NOW + 100;
    let by = Actor::new("bob").reason("receiver fixed");
    let retried = outbox.retry_all(now, &by).await.must("retry_all");
    assert_eq!(retried, u64::try_from(dead_count + 1).must("a count"));

    let rows = outbox.list(None, 1_000).await.must("list");
    for row in &rows {
        let expected = match row.dedup_id.as_str() {
            "in-flight" => (OutboxStatus::Pending, 0, NOW),
            "delivered" => (OutboxStatus::Delivered, 0, NOW),
            "due" => (OutboxStatus::Pending, 1, NOW + 20),
            "backoff" => (OutboxStatus::Pending, 1, now),
            _ => (OutboxStatus::Pending, 0, now),
        };
        assert_eq!(
            (row.status, row.attempts, row.next_attempt_at_ms),
            expected,
            "{}",
            row.dedup_id
        );
    }
    let entries = table
        .audit(&AuditFilter::new().operator("bob").limit(1_000))
        .await
        .must("audit");
    assert_eq!(entries.len(), dead_count + 1);
    assert!(entries.iter().all(|e| e.action == "outbox-retry"
        && e.scope == "outbox"
        && e.reason.as_deref() == Some("receiver fixed")));
    let mut keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    keys.sort_unstable();
    let mut expected: Vec<&str> = refs[..dead_count].to_vec();
    expected.push("backoff");
    expected.sort_unstable();
    assert_eq!(keys, expected);
    let counts = outbox.counts(now).await.must("counts");
    assert_eq!((counts.dead, counts.delivered), (0, 1));
    assert_eq!(counts.in_flight, 1);
    // Nothing left to retry.
    assert_eq!(outbox.retry_all(now, &by).await.must("retry_all"), 0);
}
