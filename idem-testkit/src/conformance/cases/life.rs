//! The rule of a key's life ([`KeyStatus::at`]), pinned branch by branch on every statement
//! that reads or changes keys by state: a key that is not final (`processing`) never expires,
//! whatever its `expires_at` says — it is processing while its lease is live and stuck once
//! the lease ran out; only a completed row past its `expires_at` is expired, swept and
//! replaceable; and a key's TTL counts from its completion.

use idem_spec::{Mode, ScopeKind};
use idem_store::sqlx::Pool;
use idem_store::staged::{Ending, Reservation};
use idem_store::{
    Action, Actor, Backend, KeyFilter, KeyRef, KeyStatus, KeyTable, NewRow, Registration,
    StoredResponse, StoredStatus,
};

use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{Must as _, RESERVATION, at, fresh, key, put};
use crate::harness::{HOUR, NOW};

/// A staged key reserved 30 hours ago with a TTL of a day (its `expires_at` six hours
/// past), its first attempt's lease until `lease_ms`: a payment killed mid-charge whose TTL
/// passed before anyone resumed it.
async fn overdue<DB: Backend>(pool: &Pool<DB>, k: KeyRef<'_>, lease_ms: i64) {
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let reserved = idem_store::staged::reserve::<DB>(
        &mut conn,
        Reservation {
            key: k,
            fingerprint: &[3; 32],
            request: "{}",
            created_ms: NOW - 30 * HOUR,
            expires_ms: NOW - 6 * HOUR,
            locked_until_ms: lease_ms,
            replace_expired: false,
            id: RESERVATION,
            field_digests: None,
        },
        None,
    )
    .await
    .must("reserve");
    assert!(reserved, "reserving the free key {}", k.key);
}

/// Three keys whose `expires_at` passed: `live` (processing, lease running), `stuck`
/// (processing, lease run out) and `done` (completed).
async fn overdue_keys<DB: Backend>(table: &KeyTable<DB>) {
    let pool = table.pool();
    overdue(pool, key("live"), NOW + 30_000).await;
    overdue(pool, key("stuck"), NOW - 1_000).await;
    assert!(put(pool, key("done"), NOW - 2 * HOUR, NOW - HOUR, b"done").await);
}

async fn listed<DB: Backend>(table: &KeyTable<DB>, status: KeyStatus) -> Vec<String> {
    let page = table
        .list(&KeyFilter::new().status(status), NOW)
        .await
        .must("list");
    page.keys.into_iter().map(|row| row.key).collect()
}

/// A processing key past its `expires_at` reads `Processing` while its lease is live and
/// `Stuck` once it ran out — in `get`, the protocol's lookup, every listing filter and the
/// counts — and never `Expired`; the stuck one is listed by
/// [`stuck`](idem_store::staged::stuck) and can be taken over, the live one cannot. Only the
/// completed key past its `expires_at` is `Expired`.
pub async fn unfinished_keys_never_expire<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    overdue_keys(&table).await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    for (k, status) in [
        ("live", KeyStatus::Processing),
        ("stuck", KeyStatus::Stuck),
        ("done", KeyStatus::Expired),
    ] {
        let row = table.get(key(k), NOW).await.must("get").must("the key");
        assert_eq!(row.status, status, "{k}: get");
        let stored = idem_store::protocol::lookup::<DB>(&mut conn, key(k), None)
            .await
            .must("lookup")
            .must("the key");
        assert_eq!(stored.status_at(NOW), status, "{k}: StoredKey::status_at");
        assert_eq!(stored.is_final(), status.is_final(), "{k}: is_final");
        assert_eq!(
            stored.status_at(NOW),
            KeyStatus::at(
                stored.status,
                stored.expires_at_ms,
                stored.locked_until_ms,
                NOW
            ),
            "{k}: status_at is KeyStatus::at"
        );
    }
    assert_eq!(listed(&table, KeyStatus::Processing).await, ["live"]);
    assert_eq!(listed(&table, KeyStatus::Stuck).await, ["stuck"]);
    assert_eq!(listed(&table, KeyStatus::Expired).await, ["done"]);
    assert!(listed(&table, KeyStatus::Completed).await.is_empty());
    let counts = table.counts(NOW).await.must("counts");
    assert_eq!(
        (
            counts.by_status.processing,
            counts.by_status.stuck,
            counts.by_status.expired,
            counts.by_status.completed,
        ),
        (1, 1, 1, 0),
        "counts (processing, stuck, expired, completed)"
    );
    assert_eq!(
        counts.oldest_stuck_created_at_ms,
        Some(NOW - 30 * HOUR),
        "the oldest stuck key"
    );

    let stuck = idem_store::staged::stuck::<DB>(&mut conn, "op:v1", NOW, i64::MAX, 10)
        .await
        .must("stuck")
        .into_iter()
        .map(|s| s.key)
        .collect::<Vec<_>>();
    assert_eq!(stuck, ["stuck"], "Backend::stuck");
    assert_eq!(
        idem_store::staged::take_over::<DB>(&mut conn, key("live"), at(1), NOW, NOW + 30_000, None)
            .await
            .must("take_over"),
        None,
        "a takeover of a live lease past expires_at"
    );
    let lease = idem_store::staged::take_over::<DB>(
        &mut conn,
        key("stuck"),
        at(1),
        NOW,
        NOW + 30_000,
        None,
    )
    .await
    .must("take_over")
    .must("taking over a stuck key past its expires_at");
    assert_eq!(lease.fence.attempt, 2, "the attempt that resumes it");
    let row = table
        .get(key("stuck"), NOW)
        .await
        .must("get")
        .must("the key");
    assert_eq!(row.status, KeyStatus::Processing, "the resumed key");
}

/// The sweep deletes completed keys past their `expires_at` and nothing else: a processing
/// key, live or stuck, stays however long ago its `expires_at` passed, and
/// [`KeyTable::count_sweepable`] counts what the sweep deletes.
pub async fn unfinished_keys_are_never_swept<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    overdue_keys(&table).await;
    let far = NOW + 1000 * HOUR;
    assert_eq!(table.count_sweepable(NOW).await.must("count_sweepable"), 1);
    assert_eq!(table.count_sweepable(far).await.must("count_sweepable"), 1);
    assert_eq!(table.sweep_batch(far, 100).await.must("sweep_batch"), 1);
    assert_eq!(table.sweep_batch(far, 100).await.must("sweep_batch"), 0);
    assert_eq!(table.count_sweepable(far).await.must("count_sweepable"), 0);
    assert!(table.get(key("done"), NOW).await.must("get").is_none());
    for (k, status) in [("live", KeyStatus::Processing), ("stuck", KeyStatus::Stuck)] {
        let row = table.get(key(k), NOW).await.must("get");
        assert_eq!(row.map(|r| r.status), Some(status), "{k} after the sweep");
    }
    let page = table.list(&KeyFilter::new(), NOW).await.must("list");
    assert_eq!(page.keys.len(), 2, "the keys the sweep left");
}

/// Neither a reservation that replaces expired keys ([`Reservation::replace_expired`]) nor
/// the atomic mode's replacing insert ([`NewRow::replace_expired`]) replaces a processing
/// row, live or stuck, past its `expires_at`; both replace the completed one.
pub async fn unfinished_keys_are_never_replaced<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    overdue_keys(&table).await;
    let pool = table.pool();
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let replacing = |k| Reservation {
        key: k,
        fingerprint: &[5; 32],
        request: "{\"again\":true}",
        created_ms: NOW,
        expires_ms: NOW + HOUR,
        locked_until_ms: NOW + 30_000,
        replace_expired: true,
        id: RESERVATION,
        field_digests: None,
    };
    let inserting = |k| NewRow {
        field_digests: None,
        key: k,
        fingerprint: &[6; 32],
        status: 200,
        headers_json: "[]",
        body: b"again",
        created_ms: NOW,
        completed_ms: NOW,
        expires_ms: NOW + HOUR,
        replace_expired: true,
    };
    for k in ["live", "stuck"] {
        let before = table.get(key(k), NOW).await.must("get").must("the key");
        assert!(
            !idem_store::staged::reserve::<DB>(&mut conn, replacing(key(k)), None)
                .await
                .must("reserve"),
            "{k}: a reservation replacing expired keys replaced a processing row"
        );
        let mut tx = DB::begin(&mut conn, &crate::conformance::settings(), None)
            .await
            .must("begin")
            .free()
            .must("begin without a lock");
        let replaced =
            idem_store::protocol::insert_completed::<DB>(&mut tx, inserting(key(k)), None)
                .await
                .must("insert_completed");
        assert!(
            !replaced,
            "{k}: an insert replacing expired keys replaced a processing row"
        );
        tx.rollback().await.must("rollback");
        assert_eq!(
            table.get(key(k), NOW).await.must("get"),
            Some(before),
            "{k}: the row after refused replacements"
        );
    }
    // The completed row past its expiry is replaced, by either.
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, replacing(key("done")), None)
            .await
            .must("reserve"),
        "a reservation did not replace the expired completed row"
    );
    assert!(put(pool, key("done-2"), NOW - 2 * HOUR, NOW - HOUR, b"").await);
    let mut tx = DB::begin(&mut conn, &crate::conformance::settings(), None)
        .await
        .must("begin")
        .free()
        .must("begin without a lock");
    assert!(
        idem_store::protocol::insert_completed::<DB>(&mut tx, inserting(key("done-2")), None)
            .await
            .must("insert_completed"),
        "an insert did not replace the expired completed row"
    );
    tx.commit().await.must("commit");
}

/// [`finish`](idem_store::staged::finish) sets `expires_at` from [`Ending::expires_ms`]: a key
/// completed after its reservation's `expires_at` passed has its whole TTL from its
/// completion — completed (replayed) until then, expired and swept after.
pub async fn finish_counts_the_ttl_from_completion<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = key("stuck");
    overdue(table.pool(), k, NOW - 1_000).await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let lease = idem_store::staged::take_over::<DB>(&mut conn, k, at(1), NOW, NOW + 30_000, None)
        .await
        .must("take_over")
        .must("resuming the stuck key");
    let ending = Ending {
        status: 201,
        headers_json: "[]",
        body: b"{\"charged\":1}",
        completed_ms: NOW + 1_000,
        expires_ms: NOW + 1_000 + 24 * HOUR,
    };
    assert!(
        idem_store::staged::finish::<DB>(&mut conn, k, lease.fence, ending, None)
            .await
            .must("finish"),
        "finishing the resumed key"
    );
    let end = NOW + 1_000 + 24 * HOUR;
    let row = table.get(k, NOW + 1_000).await.must("get").must("the key");
    assert_eq!(row.status, KeyStatus::Completed, "status after finishing");
    assert_eq!(row.expires_at_ms, end, "expires_at: the ending's");
    assert_eq!(row.completed_at_ms, Some(NOW + 1_000), "completed_at");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the key");
    assert_eq!(stored.status, StoredStatus::Completed, "lookup: status");
    assert!(stored.is_final(), "lookup: final");
    assert_eq!(stored.status_at(end - 1), KeyStatus::Completed);
    assert_eq!(stored.status_at(end), KeyStatus::Expired);
    assert_eq!(table.sweep_batch(end - 1, 100).await.must("sweep_batch"), 0);
    assert_eq!(table.sweep_batch(end, 100).await.must("sweep_batch"), 1);
}

/// An operator's complete (or fail) counts the key's TTL from the action: the operation's
/// registered TTL (`idempotency_operations.ttl_ms`), or, for an operation not registered,
/// the row's own (`expires_at - created_at`, what its reservation set).
pub async fn operator_complete_counts_the_ttl_from_now<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let registered = key("registered");
    overdue(table.pool(), registered, NOW - 1_000).await;
    let other = KeyRef {
        operation: "unregistered:v1",
        ..key("other")
    };
    overdue(table.pool(), other, NOW + 30_000).await;
    table
        .register(&[Registration {
            operation: "op:v1".into(),
            scope: ScopeKind::Global,
            ttl_ms: 2 * HOUR,
            mode: Mode::Staged,
            lease_ms: Some(30_000),
            registered_at_ms: NOW - HOUR,
            doc: None,
        }])
        .await
        .must("register");
    let by = Actor::new("alice").reason("finished by hand").force();
    let response = StoredResponse {
        status: 402,
        headers: Vec::new(),
        body: bytes::Bytes::from_static(b"declined"),
    };
    for (k, action, ttl) in [
        (registered, Action::Complete(response.clone()), 2 * HOUR),
        (other, Action::Fail(response.clone()), 24 * HOUR),
    ] {
        let seen = table.get(k, NOW).await.must("get").must("the key");
        assert!(!seen.status.is_final(), "{}: not final before", k.key);
        let acted = table.act(k, &seen, &action, &by, NOW).await.must("act");
        let after = acted.after.must("the row after the action");
        assert_eq!(after.expires_at_ms, NOW + ttl, "{}: expires_at", k.key);
        assert_eq!(after.status, KeyStatus::Completed, "{}: status", k.key);
        let later = table.get(k, NOW + ttl).await.must("get").must("the key");
        assert_eq!(later.status, KeyStatus::Expired, "{}: at its end", k.key);
    }
}
